"""samples.jsonl: a few completions of every rollout, kept in the run directory, so that they can be read
without wandb (the report quotes them; `head`, `jq` and a text editor read them too).

One JSON object a line (`FIELDS`), a few lines per rollout (`choose_rows`), appended and flushed once per
rollout. The file is bounded: `trainer.samples_file_rows` rows per rollout (0: no file) and
`trainer.samples_file_mb` megabytes in all; past the cap only the last rollout's rows are added, so the file
always ends with the end of training. A kill can tear the last line (`read_samples` skips it and says so);
a resumed run drops the rows of the rollouts its checkpoint had not finished (`truncate_samples`), as
metrics.csv drops its rows, and they are written again.

No torch or lightning here: the report reads the file with this module. Tensor arguments need only
`.tolist()`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from twinkle_exp.tracking.jsonl_lines import append_lines, read_rows, size_of

log = logging.getLogger(__name__)

SAMPLES_JSONL = "samples.jsonl"
# One row's keys, in the order they are written.
FIELDS = (
    "step",  # the optimizer step that ended the rollout's updates (metrics.csv's step of its row)
    "rollout",  # the rollout's index from 0 (metrics.csv's train/rollout)
    "row",  # the completion's row in the rollout on global rank 0 (group = row // group_size)
    "prompt",
    "completion",
    "answer",  # the task's reference answer
    "reward",  # the total reward
    "rewards",  # {reward function: its value}, the terms that add up to `reward`
    "advantage",
    "length",  # completion tokens
    "truncated",  # cut off at rollout.max_new_tokens without an end-of-sequence token
    "repeats_prompt",  # restates its prompt (train/completions/repeats_prompt_ratio counts these)
)


def _short(value: float) -> float:
    """6 significant digits: float32 values read back as 0.11999999731779099 otherwise."""
    return float(f"{float(value):.6g}")


def _plain(values: Any) -> list:
    """A list from a list or a 1-D tensor."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


def choose_rows(
    num_rows: int, group_size: int, per_rollout: int, truncated: list[bool], repeats: list[bool]
) -> list[int]:
    """The rows kept of a rollout: the first completion of each of the first `per_rollout` groups, then the
    first cut-off one and the first prompt-repeating one when those are not already among them (so the
    report's checks of those two have a completion to quote). Deterministic: the same rollout, the same rows."""
    chosen = list(range(0, num_rows, max(1, group_size)))[:per_rollout]
    for flags in (truncated, repeats):
        first = next((i for i, flag in enumerate(flags) if flag), None)
        if first is not None and first not in chosen:
            chosen.append(first)
    return sorted(chosen)


class SamplesFile:
    """Appends rows to `path`, `per_rollout` a rollout (plus the two of `choose_rows`), until the file holds
    `max_bytes`; after that only the final rollout's rows."""

    def __init__(self, path: Path, per_rollout: int, max_bytes: int) -> None:
        if per_rollout < 0 or max_bytes < 0:
            raise ValueError(
                f"trainer.samples_file_rows ({per_rollout}) and trainer.samples_file_mb must be >= 0"
            )
        self.path, self.per_rollout, self.max_bytes = Path(path), per_rollout, max_bytes
        self._capped = False

    def write_rollout(
        self,
        *,
        step: int,
        rollout: int,
        prompts: Sequence[str],
        completions: Sequence[str],
        answers: Sequence[str],
        rewards: Any,
        per_fn: dict[str, Any],
        advantages: Any,
        lengths: Any,
        truncated: Any,
        repeats: Any,
        group_size: int,
        final: bool = False,
    ) -> int:
        """Append the chosen rows of one rollout; returns how many were written.

        `prompts`, `completions`, `answers`: one per row (N, this rank's). `rewards` [N], each of `per_fn`
        [N], `lengths` [N] (completion tokens), `truncated` [N] bool, `repeats` [N] bool; `advantages`
        [>= N] (the global batch's, whose first N rows are this rank's). `final`: the last rollout of the run,
        written past the cap.
        """
        if self.per_rollout == 0:
            return 0
        if size_of(self.path) >= self.max_bytes and not final:
            if not self._capped:
                self._capped = True
                log.warning(
                    "%s reached trainer.samples_file_mb (%d bytes) at rollout %d: only the final rollout's "
                    "completions are added from now on",
                    self.path,
                    self.max_bytes,
                    rollout,
                )
            return 0
        flags, repeating = [bool(x) for x in _plain(truncated)], [bool(x) for x in _plain(repeats)]
        reward, adv, length = _plain(rewards), _plain(advantages), _plain(lengths)
        terms = {name: _plain(values) for name, values in sorted(per_fn.items())}
        rows = choose_rows(len(completions), group_size, self.per_rollout, flags, repeating)
        lines = []
        for i in rows:
            row = {
                "step": int(step),
                "rollout": int(rollout),
                "row": i,
                "prompt": prompts[i],
                "completion": completions[i],
                "answer": answers[i],
                "reward": _short(reward[i]),
                "rewards": {name: _short(values[i]) for name, values in terms.items()},
                "advantage": _short(adv[i]),
                "length": int(length[i]),
                "truncated": flags[i],
                "repeats_prompt": repeating[i],
            }
            # allow_nan: a non-finite reward is written as NaN, which Python's json reads back
            lines.append(json.dumps(row, ensure_ascii=False) + "\n")
        append_lines(
            self.path, lines
        )  # one write: a kill tears at most the last line, which the reader skips
        return len(lines)


def read_samples(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(the rows of `path` in file order, problems): ([], []) when there is no file; a line that is not a
    JSON object (a kill tore it) is skipped, and said."""
    return read_rows(path, SAMPLES_JSONL, lambda row: isinstance(row, dict))


def truncate_samples(path: Path, rollouts_done: int) -> int:
    """Keep the rows of the first `rollouts_done` rollouts (those a checkpoint had finished) and drop the
    rest, and any torn line, through a rename; returns the rows kept. The resumed run writes the dropped
    rollouts again."""
    path = Path(path)
    if not path.is_file():
        return 0
    rows, torn = read_samples(path)
    kept = [r for r in rows if isinstance(r.get("rollout"), int) and r["rollout"] < rollouts_done]
    if len(kept) == len(rows) and not torn:
        return len(kept)  # nothing to drop: the file stays as it is
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(kept)
