"""Every pair of variants on one score: probability of improvement, difference of means, and a plain sentence.

A pair is called a difference only when three things agree: the 95% bootstrap interval of the difference of
means excludes 0, the interval of P(improvement) excludes 0.5, and an exact permutation test of the difference
gives p < 0.05. The bootstrap alone would call differences between identical variants far more often than 5%
of the time with 2-3 seeds (tests/test_report_stats.py measures it); the permutation test keeps its level at
any number of seeds, and with 3 vs 3 seeds it can never go below p = 0.1, which the sentence then says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from .aggregate import DEFAULT_SCORES, Score, VariantStats
from .estimates import Estimate
from .intervals import prob_improvement
from .pairwise import (
    mean_difference,
    permutation_p_value,
    seeds_for_power,
    two_sample_estimate,
)
from .power import MAX_SEEDS, POWER
from .verdicts import ALPHA

HIGHER = "higher"  # the first variant's score is higher, and the tests agree it is a difference
NOT_DISTINGUISHABLE = "not distinguishable"
NO_VERDICT = "no verdict"  # fewer than 2 seeds on a side


@dataclass
class Comparison:
    """`first` vs `second` on `score`, oriented so that `first` has the higher (or equal) mean."""

    score: Score
    first: str  # variant labels
    second: str
    n_first: int
    n_second: int
    prob_improvement: Estimate | None  # P(a seed of first beats a seed of second), None with < 2 seeds
    difference: Estimate | None  # mean(first) - mean(second), in the metric's units (not scaled)
    p_value: float | None  # two-sided exact permutation test of the difference of means
    seeds_needed: int | None  # per variant, for 80% power; None when not applicable
    verdict: str
    sentence: str


def compare_all(
    stats: list[VariantStats], scores: tuple[Score, ...] = DEFAULT_SCORES, names: dict[str, str] | None = None
) -> list[Comparison]:
    """Every pair of variants on every score, in label order; `names` shortens labels in the sentences."""
    names = names or {}
    out = []
    for score in scores:
        for a, b in combinations(stats, 2):
            x, y = a.scores.get(score.name, []), b.scores.get(score.name, [])
            if not x or not y:
                continue
            if np.mean(y) > np.mean(x):
                a, b, x, y = b, a, y, x
            out.append(compare(score, names.get(a.label, a.label), names.get(b.label, b.label), x, y))
    return out


def compare(score: Score, first: str, second: str, x: list[float], y: list[float]) -> Comparison:
    """Compare scores `x` `[n]` of variant `first` with `y` `[m]` of `second` (mean of x >= mean of y)."""
    n, m = len(x), len(y)
    head = f"{first} vs {second} on {score.name}"
    if min(n, m) < 2:
        sentence = f"{head}: {n} vs {m} seeds, too few for an interval; no verdict."
        return Comparison(score, first, second, n, m, None, None, None, None, NO_VERDICT, sentence)
    p_imp = two_sample_estimate(x, y, prob_improvement)
    diff = two_sample_estimate(x, y, mean_difference)
    p_value = permutation_p_value(x, y)
    figures = f"P(improvement) = {p_imp.value:.2f} [{p_imp.low:.2f}, {p_imp.high:.2f}], difference {difference(diff, score)}"
    if diff.low > 0 and p_imp.low > 0.5 and p_value < ALPHA:
        sentence = f"{head}: {first} higher, {figures}, permutation p = {p_value:.3f} ({n} vs {m} seeds)."
        return Comparison(score, first, second, n, m, p_imp, diff, p_value, None, HIGHER, sentence)

    needed = seeds_for_power(x, y)
    seeds = f"{n} seeds each" if n == m else f"{n} vs {m} seeds"
    sentence = f"{head}: not distinguishable with {seeds} ({figures}, permutation p = {p_value:.2f})"
    if needed is None:
        sentence += "; the seeds show no difference to power a test on"
    elif needed > MAX_SEEDS:
        sentence += (
            f"; more than {MAX_SEEDS} seeds per variant would be needed to detect the observed difference"
        )
    else:
        sentence += (
            f"; about {needed} seeds per variant would be needed to detect the observed difference "
            f"at {POWER:.0%} power (t-test, from the observed difference and spread)"
        )
    smallest = 2 / math.comb(n + m, n)
    if smallest >= ALPHA:
        sentence += (
            f"; with {n} vs {m} seeds no result can reach p < {ALPHA:g} (smallest possible p {smallest:.2f})"
        )
    return Comparison(
        score, first, second, n, m, p_imp, diff, p_value, needed, NOT_DISTINGUISHABLE, sentence + "."
    )


def difference(e: Estimate, score: Score) -> str:
    """ "+9.2 [-2.6, +21.1] pp" for a score in %, "-0.052 [-0.081, -0.013]" otherwise."""
    if score.unit == "%":
        return f"{e.value * 100:+.1f} [{e.low * 100:+.1f}, {e.high * 100:+.1f}] pp"
    return f"{e.value:+.3g} [{e.low:+.3g}, {e.high:+.3g}]"
