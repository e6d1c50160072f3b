"""items.jsonl: every held-out prompt's result at every validation, kept in the run directory, so that the
report can pair variants item by item and count the held-out set's own noise (which prompts were drawn).

One JSON object a line, one line per validation (`FIELDS`), appended and flushed whole. `greedy` holds each
held-out prompt's greedy correctness (1.0 or 0.0) in `item` order (the prompt's index in the task's
held-out set); with `trainer.val_samples` on, `sampled_mean` the share of its n samples that were right and
`pass_at` {k: its pass@k}. The file is bounded by `max_bytes` (`MAX_BYTES` by default: about 1,300
validations of 256 prompts with 16 samples each); past the cap nothing more is written and the run says so
once. A kill can tear the last line (`read_items` skips it and says so); a resumed run validates again the
steps its checkpoint had not finished, and the later line of a step replaces the earlier one when read, so
no validation counts twice.

The file is created by the first validation of a run that has decided to run (never before), beside
samples.jsonl. No torch or lightning here: the report reads the file with this module.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from twinkle_exp.tracking.jsonl_lines import append_lines, read_rows, size_of

log = logging.getLogger(__name__)

ITEMS_JSONL = "items.jsonl"
MAX_BYTES = 16_000_000
FIELDS = (
    "step",  # the optimizer step the validation was taken at (metrics.csv's step of its val/ row)
    "rollout",  # rollouts done before it
    "item",  # the held-out prompts' indices in the task's held-out set, in the order of the lists below
    "greedy",  # 1.0 when the greedy completion was right, per item
    "sampled_mean",  # share of the n samples that were right, per item (null without val_samples)
    "pass_at",  # {k: pass@k per item} (null without val_samples)
)


def _short(value: float) -> float:
    return float(f"{float(value):.4g}")


class ItemsFile:
    """Appends one line per validation to `path` until the file holds `max_bytes`."""

    def __init__(self, path: Path, max_bytes: int = MAX_BYTES) -> None:
        if max_bytes <= 0:
            raise ValueError(f"items.jsonl's cap must be > 0 bytes, got {max_bytes}")
        self.path, self.max_bytes = Path(path), max_bytes
        self._capped = False

    def write_validation(
        self,
        *,
        step: int,
        rollout: int,
        item: Sequence[int],
        greedy: Sequence[float],
        sampled_mean: Sequence[float] | None = None,
        pass_at: dict[int, Sequence[float]] | None = None,
    ) -> bool:
        """Append one validation's per-item results (every list of one length, `item`'s); whether it was
        written (False past the cap)."""
        lengths = {len(item), len(greedy)} | ({len(sampled_mean)} if sampled_mean is not None else set())
        lengths |= {len(v) for v in (pass_at or {}).values()}
        if len(lengths) != 1:
            raise ValueError(f"items.jsonl: per-item lists of different lengths {sorted(lengths)}")
        if size_of(self.path) >= self.max_bytes:
            if not self._capped:
                self._capped = True
                log.warning(
                    "%s reached its cap (%d bytes) at step %d: no more validations are added",
                    self.path,
                    self.max_bytes,
                    step,
                )
            return False
        row = {
            "step": int(step),
            "rollout": int(rollout),
            "item": [int(i) for i in item],
            "greedy": [float(g) for g in greedy],
            "sampled_mean": None if sampled_mean is None else [_short(v) for v in sampled_mean],
            "pass_at": None
            if pass_at is None
            else {str(k): [_short(v) for v in vs] for k, vs in pass_at.items()},
        }
        append_lines(self.path, [json.dumps(row) + "\n"])
        return True


def _well_formed(row: Any) -> bool:
    return (
        isinstance(row, dict) and isinstance(row.get("step"), int) and len(row["item"]) == len(row["greedy"])
    )


def read_items(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(one row per validation step, in step order, the last written line of a step kept; problems): ([], [])
    without a file; a line that is not a well-formed row (a kill tore it) is skipped, and said."""
    rows, problems = read_rows(path, ITEMS_JSONL, _well_formed)
    by_step = {row["step"]: row for row in rows}  # a resumed run's later line of a step replaces the earlier
    return [by_step[s] for s in sorted(by_step)], problems
