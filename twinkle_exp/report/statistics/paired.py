"""Tests and intervals that respect the design: paired where the variants share what a seed fixes (the
warm-start, the prompt stream, the sampler stream), and the exact permutation tests of both designs.

Paired: seed i of one variant and seed i of the other saw the same warm-start and prompts, so the per-seed
difference d_i cancels what they share. The interval and the verdict's test are the t on d (exact for normal
differences; a shared per-seed component makes the paired interval much narrower than Welch's, which counts
it twice as noise). The sign-flip permutation test (scipy's `permutation_test` with
permutation_type="samples", which swaps x_i and y_i, that is flips the sign of d_i) assumes only that under
the null each d_i is as likely positive as negative; it is exact over all 2^n flips when 2^n <= 10,000, and
its two-sided p can never go below 2 / 2^n: 0.25 at 3 seeds, 0.0625 at 5, 0.002 at 10.

Unpaired, the exact test permutes the pooled seeds between the variants; its floor is 2 / C(n + m, n):
0.1 at 3 vs 3, 0.0079 at 5 vs 5, 1.1e-5 at 10 vs 10. Neither floor can pass Holm at 5 seeds (0.05 / 30 =
0.0017), which is why the verdict's test is the t test and these are reported beside it as a check that
does not lean on normality (see `verdicts`).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import stats

from .intervals import CONFIDENCE, Interval, TSummary, as_scores, one_sample_summary, t_bounds

N_RESAMPLES = 10_000  # above this many arrangements the permutation tests sample them at random
RNG_SEED = 0  # a report is reproducible


def paired_scores(x, y) -> tuple[np.ndarray, np.ndarray]:
    """x `[n]` and y `[n]` as finite floats, seed i of one paired with seed i of the other."""
    x, y = as_scores(x), as_scores(y)
    if len(x) != len(y):
        raise ValueError(f"a paired comparison needs the same seeds on both sides, got {len(x)} vs {len(y)}")
    return x, y


def paired_summary(x: np.ndarray, y: np.ndarray, axis: int = -1) -> TSummary:
    """Mean per-seed difference x_i - y_i along `axis` (both `[..., n]`), its se and n - 1 df."""
    return one_sample_summary(np.asarray(x, dtype=float) - np.asarray(y, dtype=float), axis, "paired t")


def paired_interval(x, y, confidence: float = CONFIDENCE) -> Interval:
    """mean(x - y) over shared seeds `[n]` and its paired t interval; no interval (None) with one seed."""
    x, y = paired_scores(x, y)
    value = float(np.mean(x - y))
    if len(x) < 2:
        return Interval(value, None, None, len(x), confidence, "none (one seed)")
    s = paired_summary(x, y)
    low, high = t_bounds(s, confidence)
    return Interval(value, float(low), float(high), len(x), confidence, "paired t interval")


def _mean_difference(x, y, axis=-1):
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def _permutation_p(x: np.ndarray, y: np.ndarray, permutation_type: str) -> float:
    res = stats.permutation_test(
        (x, y),
        _mean_difference,
        permutation_type=permutation_type,
        vectorized=True,
        n_resamples=N_RESAMPLES,
        alternative="two-sided",
        rng=np.random.default_rng(RNG_SEED),
    )
    return float(res.pvalue)


def _two_sided(null: np.ndarray, observed: float) -> float:
    """scipy's two-sided permutation p: twice the smaller tail, ties counted (relative tolerance 1e-14)."""
    gamma = abs(1e-14 * observed)
    less, greater = np.mean(null <= observed + gamma), np.mean(null >= observed - gamma)
    return float(min(1.0, 2 * min(less, greater)))


def _all_signs(n: int) -> np.ndarray:
    """Every sign vector of length n, `[2^n, n]`, in +-1."""
    return 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)


def sign_flip_p_value(x, y) -> float:
    """Two-sided p of mean(x - y) = 0 by flipping the signs of the per-seed differences (exact up to 13
    seeds, 2^13 flips: enumerated here in one matrix product, the same p as scipy's permutation_test)."""
    x, y = paired_scores(x, y)
    if 2 ** len(x) > N_RESAMPLES:
        return _permutation_p(x, y, "samples")
    differences = x - y
    return _two_sided(_all_signs(len(x)) @ differences / len(x), float(np.mean(differences)))


def permutation_p_value(x, y) -> float:
    """Two-sided p of mean(x) = mean(y) by permuting the pooled seeds (independent samples; exact when there
    are at most N_RESAMPLES splits, enumerated here as scipy's permutation_test does)."""
    x, y = as_scores(x), as_scores(y)
    n, m = len(x), len(y)
    if math.comb(n + m, n) > N_RESAMPLES:
        return _permutation_p(x, y, "independent")
    pooled = np.concatenate([x, y])
    chosen = np.array(list(itertools.combinations(range(n + m), n)), dtype=int)  # [splits, n]
    first_sum = pooled[chosen].sum(axis=1)
    null = first_sum / n - (pooled.sum() - first_sum) / m
    return _two_sided(null, float(np.mean(x) - np.mean(y)))


def exact_floor(n: int, m: int, paired: bool) -> float:
    """The smallest two-sided p the exact test can give: 2 / 2^n paired, 2 / C(n + m, n) unpaired."""
    return min(1.0, 2 / 2**n if paired else 2 / math.comb(n + m, n))


def exact_p_value(x, y, paired: bool) -> tuple[float, str]:
    """The exact test of the design and its name: (p, "sign-flip permutation") or (p, "permutation")."""
    if paired:
        return sign_flip_p_value(x, y), "sign-flip permutation"
    return permutation_p_value(x, y), "permutation"
