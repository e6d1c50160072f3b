"""A task read from the user's JSON-lines file of {"prompt": ..., "answer": ...} objects."""

from __future__ import annotations

import json
import os
import random

from twinkle_exp.tasks.base import Example, Task
from twinkle_exp.tasks.registry import register_task


def read_examples(path: str | os.PathLike[str]) -> list[Example]:
    """Parse `path`, one JSON object per line; blank lines are skipped, `answer` is coerced with str()."""
    return [ex for ex, _ in read_located_examples(path)]


def read_located_examples(path: str | os.PathLike[str]) -> list[tuple[Example, str]]:
    """`read_examples`, each example with its place ("<path>, line <n>").

    Raises FileNotFoundError naming the path, and ValueError naming the file and 1-based line number for
    a line that is not UTF-8, invalid JSON, a non-object line, a missing or null key, a non-string prompt, an
    empty answer, a prompt repeated with a different answer (a verifier can only hold one gold answer), or
    a file with no examples.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"task file not found: {path!r} (relative to {os.getcwd()!r})")
    examples: list[tuple[Example, str]] = []
    first_line: dict[str, tuple[int, str]] = {}  # prompt -> (line number, answer) of its first occurrence
    with open(path, "rb") as f:  # decoded line by line, so that a bad byte is named by its line
        for lineno, raw in enumerate(f, start=1):
            where = f"{path}, line {lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{where}: not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1})"
                ) from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: invalid JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
            for key in ("prompt", "answer"):
                if key not in record:
                    raise ValueError(f"{where}: missing key {key!r} (keys: {sorted(record)})")
                if record[key] is None:
                    raise ValueError(f"{where}: {key!r} is null")
            prompt, answer = record["prompt"], str(record["answer"])
            if not isinstance(prompt, str):
                raise ValueError(f"{where}: 'prompt' must be a string, got {type(prompt).__name__}")
            if not answer.strip():  # an empty completion would be "correct"
                raise ValueError(f"{where}: 'answer' is empty")
            earlier = first_line.setdefault(prompt, (lineno, answer))
            if earlier[1] != answer:
                raise ValueError(
                    f"{where}: prompt {prompt!r} already has answer {earlier[1]!r} (line {earlier[0]}), "
                    f"here {answer!r}"
                )
            examples.append((Example(prompt=prompt, answer=answer), where))
    if not examples:
        raise ValueError(f"{path}: no examples (the file is empty or holds only blank lines)")
    return examples


def _unique_by_prompt(examples: list[Example]) -> list[Example]:
    return list({ex.prompt: ex for ex in examples}.values())


@register_task
class JsonlTask(Task):
    """Examples from a JSON-lines file, with a held-out validation set split by prompt.

    Without `validation_path`, `num_validation` distinct prompts are held out by a `random.Random(seed)`
    shuffle; every line with a held-out prompt leaves the training split (so exact duplicate lines cannot
    leak). With `validation_path`, that file is the validation set (deduplicated by prompt, `num_validation`
    ignored) and training lines whose prompt appears in it are dropped. Training keeps duplicate lines, so
    a repeated line is sampled proportionally more often. Relative paths resolve against the working
    directory. Prompts are not restricted to ASCII here; the tokenizer decides what it can encode.
    """

    name = "jsonl"

    def __init__(
        self,
        path: str,
        validation_path: str | None = None,
        num_validation: int = 64,
        seed: int = 0,
    ):
        self.path = path
        self.validation_path = validation_path
        self.num_validation = num_validation
        self.seed = seed
        self._located = read_located_examples(path)
        examples = [ex for ex, _ in self._located]
        if validation_path is not None:
            held_out = read_located_examples(validation_path)
            self._located += held_out
            self._validation = _unique_by_prompt([ex for ex, _ in held_out])
        else:
            self._validation = self._split(examples)
        held_out = {ex.prompt for ex in self._validation}
        self._train = [ex for ex in examples if ex.prompt not in held_out]
        if not self._train:
            raise ValueError(f"{path}: every prompt is also in the validation file {validation_path!r}")

    def _split(self, examples: list[Example]) -> list[Example]:
        if self.num_validation < 1:
            raise ValueError(f"num_validation must be >= 1, got {self.num_validation}")
        unique = _unique_by_prompt(examples)  # file order, so the split depends only on file and seed
        if len(unique) <= self.num_validation:
            raise ValueError(
                f"{self.path}: {len(unique)} distinct prompts, too few to hold out "
                f"num_validation={self.num_validation} and still train; add examples, lower num_validation "
                f"or pass validation_path"
            )
        random.Random(self.seed).shuffle(unique)
        return unique[: self.num_validation]

    def validation_set(self) -> list[Example]:
        return list(self._validation)

    def data_files(self) -> list[str]:
        return [p for p in (self.path, self.validation_path) if p is not None]

    def located_examples(self) -> list[tuple[Example, str]]:
        return list(self._located)

    def sample(self, n: int, rng: random.Random) -> list[Example]:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return rng.choices(self._train, k=n)  # with replacement: small files still fill large batches
