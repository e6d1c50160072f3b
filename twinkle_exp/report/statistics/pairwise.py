"""Two variants' scores compared: probability of improvement, difference of means, an exact permutation test,
and the seeds a t-test would need. Pure functions of `[n_seeds]` arrays; the choices are stated in `estimates`."""

from __future__ import annotations

import numpy as np
from scipy import stats

from .estimates import N_RESAMPLES, RNG_SEED, Estimate, percentile_interval
from .intervals import as_scores
from .power import MAX_SEEDS, POWER
from .verdicts import ALPHA


def mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """mean(x) - mean(y) along `axis`; x `[..., n]`, y `[..., m]`."""
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def ratio_of_means(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """mean(x) / mean(y) along `axis`; x `[..., n]`, y `[..., m]`."""
    return np.mean(x, axis=axis) / np.mean(y, axis=axis)


def two_sample_estimate(x: list[float] | np.ndarray, y: list[float] | np.ndarray, statistic) -> Estimate:
    """`statistic(x, y)` with a 95% bootstrap interval, each sample resampled on its own (stratified).

    statistic: `prob_improvement`, `mean_difference` or `ratio_of_means` (vectorised over leading resample
    axes). With fewer than 2 seeds on a side there is no interval; with every seed equal on both, it is
    the value itself (every resample is the same).
    """
    x, y = as_scores(x), as_scores(y)
    value = float(statistic(x, y))
    n = min(len(x), len(y))
    if n < 2:
        return Estimate(value, None, None, n)
    if np.all(x == x[0]) and np.all(y == y[0]):
        return Estimate(value, value, value, n)
    low, high = percentile_interval((x, y), statistic)
    return Estimate(value, float(low), float(high), n)


def permutation_p_value(x: list[float] | np.ndarray, y: list[float] | np.ndarray) -> float:
    """Two-sided p-value of the difference of means under exchangeable seeds (scipy's permutation test).

    Exact (every split of the pooled seeds) when there are at most `N_RESAMPLES` splits, so it keeps its
    level at 2-3 seeds, where the bootstrap does not. Its smallest possible value is 2 / C(n + m, n):
    1/3 for 2 vs 2 seeds, 0.1 for 3 vs 3, 0.008 for 5 vs 5.
    """
    x, y = as_scores(x), as_scores(y)
    if len(x) < 1 or len(y) < 1:
        raise ValueError("permutation test needs at least one seed per variant")
    res = stats.permutation_test(
        (x, y),
        mean_difference,
        vectorized=True,
        n_resamples=N_RESAMPLES,
        alternative="two-sided",
        rng=np.random.default_rng(RNG_SEED),
    )
    return float(res.pvalue)


def seeds_for_power(x: list[float] | np.ndarray, y: list[float] | np.ndarray) -> int | None:
    """Seeds per variant for a two-sided two-sample t-test (level ALPHA) to detect the observed difference
    of means with probability POWER, taking the observed difference and pooled seed spread as the truth.

    Returns None when no difference was observed (means equal) or when both samples have no spread (any
    test separates them); MAX_SEEDS + 1 when even MAX_SEEDS would not be enough. A rough guide only: with 2-3
    seeds the difference and the spread it is computed from are themselves very uncertain.
    """
    x, y = as_scores(x), as_scores(y)
    if len(x) < 2 or len(y) < 2:
        raise ValueError("the power calculation needs at least 2 seeds per variant (for the spread)")
    diff = abs(float(np.mean(x) - np.mean(y)))
    pooled_var = ((len(x) - 1) * np.var(x, ddof=1) + (len(y) - 1) * np.var(y, ddof=1)) / (len(x) + len(y) - 2)
    if diff == 0.0 or pooled_var == 0.0:
        return None
    effect = diff / np.sqrt(pooled_var)  # Cohen's d
    n = np.arange(2, MAX_SEEDS + 1)  # every candidate at once: one vectorised call instead of a loop
    df = 2 * n - 2
    critical = stats.t.ppf(1 - ALPHA / 2, df)
    noncentrality = effect * np.sqrt(n / 2)
    power = stats.nct.sf(critical, df, noncentrality) + stats.nct.cdf(-critical, df, noncentrality)
    enough = np.flatnonzero(power >= POWER)
    return int(n[enough[0]]) if len(enough) else MAX_SEEDS + 1
