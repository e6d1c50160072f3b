"""Interval estimates over seeds, after Agarwal et al. 2021 ("Deep RL at the Edge of the Statistical Precipice").

Pure functions of small float arrays (one score per seed). The resampling is scipy's (`scipy.stats.bootstrap`,
`scipy.stats.permutation_test`), the power calculation scipy's noncentral t; nothing here is hand-rolled
beyond the statistic being resampled.

Choices, repeated in the report's method notes:
- 95% percentile bootstrap, 10,000 resamples, a fixed seed so that a report is reproducible. Percentile rather
  than BCa: it is what rliable uses, and BCa's jackknife is unstable at 2-3 seeds.
- Stratified: in a comparison each variant's seeds are resampled on their own (the variants are the strata),
  and seeds are treated as independent draws, not paired by seed number.
- The percentile bootstrap is too narrow with few seeds: with 2 or 3 seeds the interval of the mean is the
  seeds' min..max (each extreme resample has probability >= 1/27 > 2.5%), which holds the true mean 50% of the
  time with 2 seeds and 75% with 3; with 10 seeds about 90% (tests/test_report_stats.py measures all three).
  A comparison is therefore only called a difference when an exact permutation test agrees (see `compare`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
N_RESAMPLES = 10_000
ALPHA = 0.05  # the permutation test's level, and the power calculation's
POWER = 0.8
MAX_SEEDS = 1000  # the power search stops here: "more than 1000 seeds" is answer enough
RNG_SEED = 0


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its 95% bootstrap interval; `low`/`high` are None with fewer than 2 values."""

    value: float
    low: float | None
    high: float | None
    n: int


def iqm(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean along `axis`: the mean of the middle 50% (scipy's trim_mean, 25% cut each side).

    With fewer than 4 values nothing is cut, so it equals the mean.
    """
    return stats.trim_mean(x, 0.25, axis=axis)


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


STATISTICS = {"mean": _mean, "iqm": iqm}


def bootstrap_estimate(values: list[float] | np.ndarray, statistic: str = "mean") -> Estimate:
    """`statistic` ("mean" or "iqm") of `values` `[n_seeds]` with its 95% percentile bootstrap interval."""
    x = _as_scores(values)
    fn = STATISTICS[statistic]
    value = float(fn(x))
    if len(x) < 2:
        return Estimate(value, None, None, len(x))
    if np.all(x == x[0]):
        return Estimate(value, value, value, len(x))  # every resample is the same: scipy warns and gives NaN
    res = stats.bootstrap(
        (x,),
        fn,
        vectorized=True,
        axis=-1,
        method="percentile",
        n_resamples=N_RESAMPLES,
        confidence_level=CONFIDENCE,
        rng=np.random.default_rng(RNG_SEED),
    )
    low, high = res.confidence_interval
    return Estimate(value, float(low), float(high), len(x))


def bootstrap_band(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """95% percentile bootstrap interval of the mean over seeds at every step.

    values: `[n_seeds, n_steps]`, NaN where a seed did not log that step. Returns `(low, high)`, each
    `[n_steps]`; NaN where fewer than 2 seeds logged the step. Steps with the same seeds present are
    resampled in one vectorised call (a curve has hundreds of steps, but only a few such patterns).
    """
    values = np.asarray(values, dtype=float)
    low = np.full(values.shape[1], np.nan)
    high = np.full(values.shape[1], np.nan)
    present = ~np.isnan(values)
    patterns = {tuple(column) for column in present.T}
    for pattern in patterns:
        rows = np.array(pattern)
        if rows.sum() < 2:
            continue
        columns = np.all(present == rows[:, None], axis=0)
        block = values[rows][:, columns]  # [n_present, n_columns]
        constant = np.all(block == block[:1], axis=0)
        low[np.flatnonzero(columns)[constant]] = block[0, constant]
        high[np.flatnonzero(columns)[constant]] = block[0, constant]
        if constant.all():
            continue
        varying = block[:, ~constant]
        res = stats.bootstrap(
            (varying,),
            _mean,
            vectorized=True,
            axis=0,
            method="percentile",
            n_resamples=N_RESAMPLES,
            confidence_level=CONFIDENCE,
            rng=np.random.default_rng(RNG_SEED),
        )
        low[np.flatnonzero(columns)[~constant]] = res.confidence_interval.low
        high[np.flatnonzero(columns)[~constant]] = res.confidence_interval.high
    return low, high


def prob_improvement(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """P(X > Y) + P(X = Y) / 2 for one seed of each, over all pairs of seeds (Mann-Whitney's U / (n m)).

    x: `[..., n]`, y: `[..., m]` along `axis` (the leading axes are bootstrap resamples). 0.5 for identical
    samples, 1 when every seed of x beats every seed of y.
    """
    x = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    y = np.moveaxis(np.asarray(y, dtype=float), axis, -1)
    greater = x[..., :, None] > y[..., None, :]
    equal = x[..., :, None] == y[..., None, :]
    return np.mean(greater + 0.5 * equal, axis=(-2, -1))


def mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """mean(x) - mean(y) along `axis`; x `[..., n]`, y `[..., m]`."""
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def two_sample_estimate(x: list[float] | np.ndarray, y: list[float] | np.ndarray, statistic) -> Estimate:
    """`statistic(x, y)` with a 95% bootstrap interval, each sample resampled on its own (stratified).

    statistic: `prob_improvement` or `mean_difference` (vectorised over leading resample axes).
    """
    x, y = _as_scores(x), _as_scores(y)
    value = float(statistic(x, y))
    n = min(len(x), len(y))
    if n < 2:
        return Estimate(value, None, None, n)
    if np.all(x == x[0]) and np.all(y == y[0]):
        return Estimate(value, value, value, n)
    res = stats.bootstrap(
        (x, y),
        statistic,
        vectorized=True,
        axis=-1,
        method="percentile",
        n_resamples=N_RESAMPLES,
        confidence_level=CONFIDENCE,
        rng=np.random.default_rng(RNG_SEED),
    )
    low, high = res.confidence_interval
    return Estimate(value, float(low), float(high), n)


def permutation_p_value(x: list[float] | np.ndarray, y: list[float] | np.ndarray) -> float:
    """Two-sided p-value of the difference of means under exchangeable seeds (scipy's permutation test).

    Exact (every split of the pooled seeds) when there are at most `N_RESAMPLES` splits, so it keeps its
    level at 2-3 seeds, where the bootstrap does not. Its smallest possible value is 2 / C(n + m, n):
    1/3 for 2 vs 2 seeds, 0.1 for 3 vs 3, 0.008 for 5 vs 5.
    """
    x, y = _as_scores(x), _as_scores(y)
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
    x, y = _as_scores(x), _as_scores(y)
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


def _as_scores(values) -> np.ndarray:
    x = np.asarray(values, dtype=float).reshape(-1)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"scores must be finite numbers, got {x.tolist()}")
    return x
