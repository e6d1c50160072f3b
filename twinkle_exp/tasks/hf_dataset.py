"""A task from any `datasets` dataset: a hub id (online), a local dataset directory, or a local file."""

from __future__ import annotations

import os
import random
from typing import Any

from twinkle_exp.tasks.answers import get_answer_extractor
from twinkle_exp.tasks.base import Example, Task
from twinkle_exp.tasks.registry import register_task

# A single local file is read with the `datasets` builder for its format.
FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def is_local_file(path: str) -> bool:
    return os.path.isfile(os.path.expanduser(path))


def load_rows(
    path: str, subset: str | None = None, split: str = "train", key: str = "task.path"
) -> list[dict[str, Any]]:
    """The rows of one split as dicts. A local file is a single split, read whatever `split` says.

    `key` is the setting `path` came from, for the error message.
    """
    try:
        import datasets
    except ImportError as e:
        raise ImportError("task=hf_dataset needs datasets: pip install twinkle_exp[hf]") from e
    if is_local_file(path):
        suffix = os.path.splitext(path)[1].lower()
        if suffix not in FILE_BUILDERS:
            raise ValueError(
                f"{key}={path!r}: unknown file type {suffix!r}; expected one of {sorted(FILE_BUILDERS)}"
            )
        where = {"path": FILE_BUILDERS[suffix], "data_files": os.path.expanduser(path), "split": "train"}
        if os.path.getsize(os.path.expanduser(path)) == 0:
            raise ValueError(f"{key}={path!r}: the file is empty")
    elif key != "task.path":  # a held-out file must be a file: it is never read from the hub
        raise ValueError(f"{key}={path!r}: no such file (relative to {os.getcwd()!r})")
    else:
        where = {"path": path, "name": subset, "split": split}
    try:
        dataset = datasets.load_dataset(**where)
    except Exception as e:  # offline, a typo in the id, a missing split: say which setting it came from
        message = " ".join(str(e).split())  # one line, whatever the library wrote
        raise ValueError(
            f"{key}={path!r} (subset {subset!r}, split {split!r}): {type(e).__name__}: {message}"
        ) from e
    return dataset.to_list()


@register_task
class HFDatasetTask(Task):
    """Examples from a dataset: `prompt_template` filled from each row's fields, the gold answer from
    `answer_field` (optionally through `answer_extractor`), and a held-out validation set.

    Held-out set: `validation_split` (another split of the same hub dataset or directory) or
    `validation_path` (a local file), shuffled with `seed` and cut to `num_validation`; without either,
    `num_validation` distinct prompts of the training split are held out. Training never sees a held-out
    prompt. With `chat_template`, the policy wraps each prompt in its tokenizer's chat template, after a
    system turn of `system_prompt` when one is given.
    """

    name = "hf_dataset"

    def __init__(
        self,
        path: str,
        prompt_template: str = "{question}",
        answer_field: str = "answer",
        answer_extractor: str | None = None,
        subset: str | None = None,
        split: str = "train",
        validation_split: str | None = None,
        validation_path: str | None = None,
        num_validation: int = 128,
        seed: int = 0,
        chat_template: bool = False,
        system_prompt: str | None = None,
    ):
        if num_validation < 1:
            raise ValueError(f"task.num_validation must be >= 1, got {num_validation}")
        if validation_split is not None and validation_path is not None:
            raise ValueError(
                "task.validation_split and task.validation_path both set: choose one held-out set"
            )
        if validation_split is not None and is_local_file(path):
            raise ValueError(
                f"task.validation_split={validation_split!r}, but task.path={path!r} is a single file (one "
                f"split); pass the held-out file as task.validation_path"
            )
        self.path, self.prompt_template, self.answer_field = path, prompt_template, answer_field
        self.validation_path = validation_path
        self.num_validation, self.seed = num_validation, seed
        self.chat_template, self.system_prompt = chat_template, system_prompt
        self._extract = None if answer_extractor is None else get_answer_extractor(answer_extractor)
        self._located: list[tuple[Example, str]] = []  # every row read, with its place (`located_examples`)

        train = self._examples(load_rows(path, subset, split), _source(path, subset, split))
        if validation_path is not None:
            rows = load_rows(validation_path, key="task.validation_path")
            held_out = self._sample_held_out(self._examples(rows, validation_path))
        elif validation_split is not None:
            rows = load_rows(path, subset, validation_split)
            held_out = self._sample_held_out(self._examples(rows, _source(path, subset, validation_split)))
        else:
            held_out = self._hold_out(train)
        self._validation = held_out
        prompts = {ex.prompt for ex in held_out}
        self._train = [ex for ex in train if ex.prompt not in prompts]
        if not self._train:
            raise ValueError(f"task.path={path!r}: every training prompt is also in the held-out set")

    def _examples(self, rows: list[dict[str, Any]], source: str) -> list[Example]:
        """One example per row; a row that cannot make one is an error naming the source and the row."""
        examples: list[Example] = []
        first_seen: dict[str, tuple[int, str]] = {}  # prompt -> (row, answer)
        for i, row in enumerate(rows):
            try:
                prompt = self.prompt_template.format_map(_NoNulls(row))
            except KeyError as e:
                raise ValueError(
                    f"{source}, row {i}: task.prompt_template names the field {e}, the rows have {sorted(row)}"
                ) from None
            except _NullField as e:  # datasets fills a field some rows lack with null: it would read 'None'
                raise ValueError(
                    f"{source}, row {i}: the field {e.args[0]!r} of task.prompt_template is empty (null)"
                ) from None
            if not prompt.strip():
                raise ValueError(
                    f"{source}, row {i}: the prompt is empty (task.prompt_template {self.prompt_template!r})"
                )
            answer = self._answer(row, f"{source}, row {i} (prompt {prompt[:60]!r})")
            earlier = first_seen.setdefault(prompt, (i, answer))
            if earlier[1] != answer:
                raise ValueError(
                    f"{source}, row {i}: prompt {prompt[:60]!r} already has answer {earlier[1]!r} "
                    f"(row {earlier[0]}), here {answer!r}; a verifier holds one gold answer per prompt"
                )
            examples.append(Example(prompt=prompt, answer=answer))
            self._located.append((examples[-1], f"{source}, row {i}"))
        if not examples:
            raise ValueError(f"{source}: no rows")
        return examples

    def _answer(self, row: dict[str, Any], where: str) -> str:
        if self.answer_field not in row:
            raise ValueError(
                f"{where}: no field task.answer_field={self.answer_field!r} (fields: {sorted(row)})"
            )
        value = row[self.answer_field]
        if value is None:
            raise ValueError(f"{where}: the answer field {self.answer_field!r} is empty (null)")
        if self._extract is None:
            answer = str(value)
        else:
            try:
                answer = self._extract(str(value))
            except ValueError as e:
                raise ValueError(f"{where}: bad gold answer {str(value)[-80:]!r}: {e}") from None
        if not str(answer).strip():  # an empty completion would be "correct"
            raise ValueError(f"{where}: the gold answer is empty (field {self.answer_field!r})")
        return answer

    def _sample_held_out(self, examples: list[Example]) -> list[Example]:
        unique = list(
            {ex.prompt: ex for ex in examples}.values()
        )  # file order: depends on file and seed only
        random.Random(self.seed).shuffle(unique)
        return unique[: self.num_validation]

    def _hold_out(self, train: list[Example]) -> list[Example]:
        distinct = len({ex.prompt for ex in train})
        if distinct <= self.num_validation:
            raise ValueError(
                f"task.path={self.path!r}: {distinct} distinct prompts, too few to hold out "
                f"task.num_validation={self.num_validation} and still train; lower it or pass a validation set"
            )
        return self._sample_held_out(train)

    def validation_set(self) -> list[Example]:
        return list(self._validation)

    def located_examples(self) -> list[tuple[Example, str]]:
        return list(self._located)

    def data_files(self) -> list[str]:
        # Local files only: a hub dataset or a directory is named by the config, which the cache key holds.
        return [p for p in (self.path, self.validation_path) if p is not None and is_local_file(p)]

    def sample(self, n: int, rng: random.Random) -> list[Example]:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return rng.choices(self._train, k=n)  # with replacement: small datasets still fill large batches


class _NullField(Exception):
    """A field of the prompt template whose value in the row is null."""


class _NoNulls(dict):
    """A row for `str.format_map` that refuses its null fields instead of writing them as 'None'."""

    def __getitem__(self, key: str) -> Any:
        value = super().__getitem__(key)
        if value is None:
            raise _NullField(key)
        return value


def _source(path: str, subset: str | None, split: str) -> str:
    if is_local_file(path):
        return path
    return f"{path}" + (f" ({subset})" if subset else "") + f" split {split!r}"
