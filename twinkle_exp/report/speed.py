"""Steps to the accuracy threshold compared between variants: the ratio of their means, with an interval.

DAPO and CISPO state their claims "at equal steps" (half the steps to the same score): the ratio of steps to
a threshold is the statistic those claims are read by. A ratio is given for each pair of variants where at
least MIN_REACHED finished runs of each reached the threshold; runs that never did are counted beside it,
not averaged (their steps are unknown). Interval: the stratified percentile bootstrap of the ratio of means
(`stats`); p: the exact permutation test of the difference of means (`pairwise_stats`).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from .aggregate import VariantStats
from .pairwise_stats import permutation_p_value
from .stats import as_scores, percentile_interval

MIN_REACHED = 2
HEADERS = ["pair", "steps (first, reached)", "steps (second, reached)", "ratio first / second [95% CI]", "p"]


def _ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis) / np.mean(y, axis=axis)


def ratio_row(a: VariantStats, b: VariantStats, names: dict[str, str]) -> list[str] | None:
    """One row under HEADERS for the pair, or None when either reached the threshold in < MIN_REACHED runs."""
    if min(len(a.steps_to_threshold), len(b.steps_to_threshold)) < MIN_REACHED:
        return None
    x, y = as_scores(a.steps_to_threshold), as_scores(b.steps_to_threshold)
    value = float(_ratio(x, y))
    if np.all(x == x[0]) and np.all(y == y[0]):
        interval = f"[{value:.2f}, {value:.2f}]"
    else:
        low, high = percentile_interval((x, y), _ratio)
        interval = f"[{low:.2f}, {high:.2f}]"
    return [
        f"{names.get(a.label, a.label)} vs {names.get(b.label, b.label)}",
        f"{x.mean():.1f} ({len(x)}/{a.evaluated})",
        f"{y.mean():.1f} ({len(y)}/{b.evaluated})",
        f"{value:.2f} {interval}",
        f"{permutation_p_value(x, y):.3f}",
    ]


def threshold_ratios(stats: list[VariantStats], names: dict[str, str]) -> list[list[str]]:
    """A row for every pair of variants with enough runs at the threshold."""
    return [row for a, b in combinations(stats, 2) if (row := ratio_row(a, b, names)) is not None]
