"""Steps to the accuracy threshold compared between variants: the ratio of their means, with an interval.

DAPO and CISPO state their claims "at equal steps" (half the steps to the same score): the ratio of steps to
a threshold is the statistic those claims are read by. A ratio is given for each pair of variants where at
least MIN_REACHED finished runs of each reached the threshold; runs that never did are counted beside it,
not averaged (their steps are unknown). Interval: the stratified percentile bootstrap of the ratio of means
(`estimates`); p: the exact permutation test of the difference of means (`pairwise`).
"""

from __future__ import annotations

from itertools import combinations

from .aggregate import VariantStats
from .intervals import as_scores
from .pairwise import permutation_p_value, ratio_of_means, two_sample_estimate

MIN_REACHED = 2
HEADERS = ["pair", "steps (first, reached)", "steps (second, reached)", "ratio first / second [95% CI]", "p"]


def ratio_row(a: VariantStats, b: VariantStats, names: dict[str, str]) -> list[str] | None:
    """One row under HEADERS for the pair, or None when either reached the threshold in < MIN_REACHED runs."""
    if min(len(a.steps_to_threshold), len(b.steps_to_threshold)) < MIN_REACHED:
        return None
    x, y = as_scores(a.steps_to_threshold), as_scores(b.steps_to_threshold)
    ratio = two_sample_estimate(x, y, ratio_of_means)
    return [
        f"{names.get(a.label, a.label)} vs {names.get(b.label, b.label)}",
        f"{x.mean():.1f} ({len(x)}/{a.evaluated})",
        f"{y.mean():.1f} ({len(y)}/{b.evaluated})",
        f"{ratio.value:.2f} [{ratio.low:.2f}, {ratio.high:.2f}]",
        f"{permutation_p_value(x, y):.3f}",
    ]


def threshold_ratios(stats: list[VariantStats], names: dict[str, str]) -> list[list[str]]:
    """A row for every pair of variants with enough runs at the threshold."""
    return [row for a, b in combinations(stats, 2) if (row := ratio_row(a, b, names)) is not None]
