"""Intervals over seeds: of a mean, of a difference of means, and of P(improvement).

Choice, quoted by the report's method notes (docs/statistics.md has the measurements and the command):
- Means and differences of means get t intervals: Student's for one sample (and, in `paired`, for per-seed
  differences), Welch's for two independent samples. They are exact for normal data at any n >= 2 (95.0-
  95.1% measured at 3, 5, 10 seeds), which no bootstrap is at 3-5 seeds: the percentile bootstrap holds a
  normal mean 75% / 84% / 90% of the time at n = 3 / 5 / 10, BCa 73% / 85% / 90% (its acceleration is itself
  estimated from those few values); a studentized bootstrap needs a standard error per resample, and at
  n = 3 21 of the 27 equally likely resamples have fewer than 3 distinct values. Welch's df makes it a
  little conservative with equal spreads (96.7% at 3 vs 3, 95.8% at 5 vs 5, 95.4% at 10 vs 10), and it keeps
  its coverage when one variant is far noisier than the other (95% at a spread ratio of 3: a collapsing loss).
- Skewed scores: a single variant's t interval undercovers (lognormal 82-84%, an accuracy-like Beta(18, 2)
  92-94%), a difference of two variants of the same shape does not (97-98% and 95.5-96.7%).
- P(improvement) = P(a seed of the first beats a seed of the second), ties half (Mann-Whitney U / (n m)),
  gets a score-type interval: every theta whose Hanley-McNeil variance, with both sample sizes replaced by
  their mean (Newcombe 2006, "method 5"), puts the observed value within z standard errors. Unlike the
  bootstrap it does not collapse under complete separation: 5 seeds all above 5 give [0.64, 1.00], and the
  interval says `at_bound` because the estimate sits at 1. Coverage 94.7-95.7% at 5 seeds, 95.0-96.1% at
  10; at 3 vs 3 it is 90% for identical variants (they separate completely 1 time in 10) and 94-97% else.

Every function takes plain float arrays `[n]` (one score per seed); the `*_summary` ones also take `[..., n]`
along `axis` and return arrays, which is how the coverage tests simulate thousands of sweeps at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special, stats
from scipy.optimize import elementwise

CONFIDENCE = 0.95


@dataclass(frozen=True)
class TSummary:
    """An estimate, its standard error and the t distribution's degrees of freedom: all a t test, its interval,
    a TOST and a power calculation need. Floats, or arrays of one shape when computed along an axis."""

    estimate: np.ndarray | float
    se: np.ndarray | float
    df: np.ndarray | float
    test: str  # "one-sample t", "Welch t" or "paired t": the name the verdict file records


@dataclass(frozen=True)
class Interval:
    """A point estimate and its interval; `low`/`high` are None when the sample is too small for one.

    at_bound: the estimate sits at the end of its range (P(improvement) at 0 or 1), so the interval is
    one-sided there: read "at least `low`", not "between".
    """

    value: float
    low: float | None
    high: float | None
    n: int
    confidence: float
    method: str
    at_bound: bool = False


def as_scores(values, what: str = "scores") -> np.ndarray:
    """Scores as a flat float array `[n]`; refuses NaN and inf with a one-line error."""
    x = np.asarray(values, dtype=float).reshape(-1)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what} must be finite numbers, got {x.tolist()}")
    return x


def one_sample_summary(x: np.ndarray, axis: int = -1, test: str = "one-sample t") -> TSummary:
    """Mean of `x` `[..., n]` along `axis`, with s / sqrt(n) and n - 1 degrees of freedom."""
    x = np.asarray(x, dtype=float)
    n = x.shape[axis]
    return TSummary(np.mean(x, axis=axis), np.std(x, axis=axis, ddof=1) / np.sqrt(n), n - 1.0, test)


def welch_summary(x: np.ndarray, y: np.ndarray, axis: int = -1) -> TSummary:
    """mean(x) - mean(y) along `axis` (x `[..., n]`, y `[..., m]`), Welch's standard error and its
    Welch-Satterthwaite degrees of freedom (tests check both against scipy.stats.ttest_ind)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n, m = x.shape[axis], y.shape[axis]
    vx, vy = np.var(x, axis=axis, ddof=1) / n, np.var(y, axis=axis, ddof=1) / m
    with np.errstate(invalid="ignore", divide="ignore"):
        df = (vx + vy) ** 2 / (vx**2 / (n - 1) + vy**2 / (m - 1))
    df = np.where(vx + vy == 0, n + m - 2.0, df)  # no spread at all: any df gives the same (zero) width
    estimate = np.mean(x, axis=axis) - np.mean(y, axis=axis)
    return TSummary(estimate, np.sqrt(vx + vy), df[()] if np.ndim(df) == 0 else df, "Welch t")


def t_bounds(s: TSummary, confidence: float = CONFIDENCE) -> tuple:
    """The two-sided `confidence` t interval (low, high) of `s.estimate`."""
    half = special.stdtrit(s.df, 0.5 + confidence / 2) * s.se
    return s.estimate - half, s.estimate + half


def t_p_value(s: TSummary, null: float = 0.0, alternative: str = "two-sided"):
    """p-value of the t test of `estimate == null` ("two-sided", "greater": estimate > null, or "less").

    With no spread at all (se = 0) there is no test: p = 1. Identical per-seed figures (a score that
    saturated, a metric that was not logged as it varied) carry no information about the noise, and the t
    interval has width zero; calling that "different" would turn 2 seeds at 20.0 into a certainty.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (np.asarray(s.estimate) - null) / np.asarray(s.se)
        t = np.where(np.asarray(s.se) == 0, np.nan, t)
    if alternative == "greater":
        p = stats.t.sf(t, s.df)
    elif alternative == "less":
        p = stats.t.cdf(t, s.df)
    elif alternative == "two-sided":
        p = np.minimum(1.0, 2 * stats.t.sf(np.abs(t), s.df))
    else:
        raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less', got {alternative!r}")
    return np.where(np.isnan(t), 1.0, p)[()]


def _interval(s: TSummary, n: int, confidence: float) -> Interval:
    low, high = t_bounds(s, confidence)
    return Interval(float(s.estimate), float(low), float(high), n, confidence, f"{s.test} interval")


NO_SPREAD = "none (no spread: every seed gave the same value)"


def mean_interval(values, confidence: float = CONFIDENCE) -> Interval:
    """Mean of `values` `[n]` and its t interval; no interval (None) with one value or no spread (a
    zero-width interval says nothing about the noise, so none is published)."""
    x = as_scores(values)
    if len(x) < 2:
        return Interval(float(np.mean(x)), None, None, len(x), confidence, "none (one seed)")
    if np.ptp(x) == 0:
        return Interval(float(np.mean(x)), None, None, len(x), confidence, NO_SPREAD)
    return _interval(one_sample_summary(x), len(x), confidence)


def difference_interval(x, y, confidence: float = CONFIDENCE) -> Interval:
    """mean(x) - mean(y) of two independent samples `[n]`, `[m]` and its Welch t interval; no interval
    (None) unless both have 2 seeds. `n` is the smaller sample's size."""
    x, y = as_scores(x), as_scores(y)
    n = min(len(x), len(y))
    if n < 2:
        return Interval(float(np.mean(x) - np.mean(y)), None, None, n, confidence, "none (one seed)")
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        return Interval(float(np.mean(x) - np.mean(y)), None, None, n, confidence, NO_SPREAD)
    return _interval(welch_summary(x, y), n, confidence)


def prob_improvement(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """P(X > Y) + P(X = Y) / 2 over all pairs of seeds (Mann-Whitney's U / (n m)). x `[..., n]`, y `[..., m]`."""
    x = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    y = np.moveaxis(np.asarray(y, dtype=float), axis, -1)
    return np.mean(np.sign(x[..., :, None] - y[..., None, :]) + 1, axis=(-2, -1)) / 2


def newcombe_bounds(theta_hat, n, m, confidence: float = CONFIDENCE) -> tuple:
    """Score-type bounds (low, high) of P(improvement) from its estimate(s) `theta_hat` at n vs m seeds (all
    three broadcast): the roots of (theta_hat - theta)^2 = z^2 V(theta), V the Hanley-McNeil variance at
    n* = (n + m) / 2. One call for many pairs is one vectorised root search."""
    theta_hat, n, m = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (theta_hat, n, m)))
    z2 = stats.norm.ppf(0.5 + confidence / 2) ** 2
    k = (n + m) / 2 - 1

    def gap(theta, observed, k):  # k rides in args: find_root passes only the elements still searching
        var = (
            theta * (1 - theta) / (k + 1) ** 2 * (1 + k * (1 - theta) / (2 - theta) + k * theta / (1 + theta))
        )
        return (observed - theta) ** 2 - z2 * var

    tiny = 1e-12  # the root at an end of [0, 1] when the estimate sits there is not the bound sought
    below = np.where(theta_hat >= 1, 1 - tiny, theta_hat)  # gap < 0 here, > 0 at 0
    above = np.where(theta_hat <= 0, tiny, theta_hat)  # gap < 0 here, > 0 at 1
    low = elementwise.find_root(gap, (0.0, below), args=(theta_hat, k)).x
    high = elementwise.find_root(gap, (above, 1.0), args=(theta_hat, k)).x
    low = np.where(theta_hat <= 0, 0.0, low)
    high = np.where(theta_hat >= 1, 1.0, high)
    return low[()], high[()]


def prob_improvement_interval(x, y, confidence: float = CONFIDENCE) -> Interval:
    """P(improvement) of `x` `[n]` over `y` `[m]` with its score-type interval (`newcombe_bounds`)."""
    x, y = as_scores(x), as_scores(y)
    value = float(prob_improvement(x, y))
    n = min(len(x), len(y))
    if n < 2:
        return Interval(value, None, None, n, confidence, "none (one seed)")
    low, high = newcombe_bounds(value, len(x), len(y), confidence)
    method = "Newcombe score interval (Hanley-McNeil variance)"
    return Interval(value, float(low), float(high), n, confidence, method, at_bound=value in (0.0, 1.0))
