"""Interval estimates over seeds, after Agarwal et al. 2021 ("Deep RL at the Edge of the Statistical Precipice"):
one variant's estimates here, two variants' (P(improvement), difference, tests, power) in `pairwise`.

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

from .intervals import CONFIDENCE, as_scores

# The confidence level is the verdicts' own (`intervals.CONFIDENCE`), as are the tests' level
# (`verdicts.ALPHA`) and the power calculation's POWER and MAX_SEEDS (`power`): one of each in the report.
N_RESAMPLES = 10_000
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
    """Mean along `axis` (the bootstrap's vectorised statistic)."""
    return np.mean(x, axis=axis)


STATISTICS = {"mean": _mean, "iqm": iqm}


def percentile_interval(samples: tuple[np.ndarray, ...], statistic, axis: int = -1) -> tuple:
    """The 95% percentile bootstrap interval (low, high) of `statistic(*samples)`, each sample resampled on
    its own along `axis` (stratified), with the report's fixed resample count and seed."""
    res = stats.bootstrap(
        samples,
        statistic,
        vectorized=True,
        axis=axis,
        method="percentile",
        n_resamples=N_RESAMPLES,
        confidence_level=CONFIDENCE,
        rng=np.random.default_rng(RNG_SEED),
    )
    return res.confidence_interval.low, res.confidence_interval.high


def bootstrap_estimate(values: list[float] | np.ndarray, statistic: str = "mean") -> Estimate:
    """`statistic` ("mean" or "iqm") of `values` `[n_seeds]` with its 95% percentile bootstrap interval."""
    x = as_scores(values)
    fn = STATISTICS[statistic]
    value = float(fn(x))
    if len(x) < 2:
        return Estimate(value, None, None, len(x))
    if np.all(x == x[0]):
        return Estimate(value, value, value, len(x))  # every resample is the same: scipy warns and gives NaN
    low, high = percentile_interval((x,), fn)
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
        interval = percentile_interval((varying,), _mean, axis=0)
        low[np.flatnonzero(columns)[~constant]], high[np.flatnonzero(columns)[~constant]] = interval
    return low, high
