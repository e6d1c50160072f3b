"""A diagnosis: one trap seen in one run, with its evidence and what to change; and the helpers the
diagnostics read a run's metrics and config with."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from twinkle_exp.tracking.metrics_csv import Series

from ..series import last_quarter


@dataclass(frozen=True)
class Diagnosis:
    """One trap found in one run: `diagnostic` is the id of the diagnostic (a key of `per_run.DIAGNOSTICS`)."""

    diagnostic: str
    evidence: str  # which metric, which steps, which values
    advice: str  # what to change, naming config keys
    quotes: tuple[str, ...] = ()  # completions of the run that show it (from samples.jsonl), when it has some


def config_at(config: dict, dotted: str):
    """config["a"]["b"] for "a.b", or None when any level is missing."""
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def metric_values(metrics: dict[str, Series], key: str) -> np.ndarray:
    """The values of metric `key`, `[num_logged_steps]` (empty if not logged)."""
    return np.array([v for _, v in metrics.get(key, [])])


def last_quarter_start(series: Series) -> int:
    """The first step of the last quarter of the logged steps."""
    return last_quarter(series)[0][0]


def step_ranges(steps: list[int]) -> str:
    """`[0, 2, 4, 6, 10]` -> "0-6, 10": runs of equally spaced steps written as ranges."""
    if not steps:
        return ""
    gap = min((b - a for a, b in zip(steps, steps[1:], strict=False) if b > a), default=1)
    parts, start = [], steps[0]
    for prev, cur in zip(steps, [*steps[1:], None], strict=True):
        if cur is None or cur - prev != gap:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = cur
    return ", ".join(parts)
