"""Steps to a threshold when some runs never reach it: a right-censored time, summarised without bookkeeping.

A run that never reached the threshold is censored at its last step: it took longer than that, by an unknown
amount. Averaging only the runs that reached it (the old table) rewards an arm for the runs it lost: 1 of 3
at step 40 looked faster than 3 of 3 at step 80. The statistic here is the restricted mean time to the
threshold up to a horizon tau, RMST = the area under the Kaplan-Meier "not yet reached" curve from step 0 to
tau (scipy's `ecdf` of the censored data): the mean number of steps spent below the threshold within the
first tau steps. Lower is faster; every run counts, and a run that never got there counts as tau.

When every run was followed to the horizon (tau = the earliest last step of the runs compared, the default
a caller should use), the Kaplan-Meier area equals the plain mean of min(T_i, tau) over runs, so the
per-run values are complete data: the interval is the t interval over runs (`intervals`) and the same
per-run values go through the pair verdicts like any score. With runs censored before tau (stopped early),
the interval is normal with the Greenwood-type variance of the area (Klein & Moeschberger 4.5). The
Kaplan-Meier median is given too; it is None when fewer than half the runs reached the threshold by tau.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from .intervals import CONFIDENCE, mean_interval


@dataclass(frozen=True)
class TimeToThreshold:
    """Restricted mean steps to the threshold within `horizon`, its interval, and how many runs got there."""

    value: float
    low: float | None
    high: float | None
    confidence: float
    method: str
    horizon: float
    reached: int  # runs that reached the threshold by the horizon
    runs: int
    median: float | None  # Kaplan-Meier median; None when fewer than half reached it by the horizon

    @property
    def fraction_reached(self) -> float:
        return self.reached / self.runs


def first_reach(steps, values, threshold: float) -> tuple[float, bool]:
    """(first step with value >= threshold, True), or (the last logged step, False): censored there."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if len(steps) == 0 or len(steps) != len(values):
        raise ValueError(
            f"a curve needs as many steps as values, at least one; got {len(steps)} and {len(values)}"
        )
    hits = np.flatnonzero(values >= threshold)
    return (float(steps[hits[0]]), True) if len(hits) else (float(steps[-1]), False)


def _check(times, reached, horizon: float) -> tuple[np.ndarray, np.ndarray]:
    t, r = np.asarray(times, dtype=float).reshape(-1), np.asarray(reached, dtype=bool).reshape(-1)
    if len(t) == 0 or len(t) != len(r) or not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ValueError(
            f"times must be finite steps >= 0, one per run with its reached flag; got {t.tolist()}"
        )
    if not (np.isfinite(horizon) and horizon > 0):
        raise ValueError(f"the horizon must be a positive step, got {horizon}")
    return t, r


def followed_to_horizon(times, reached, horizon: float) -> bool:
    """Whether every run that did not reach the threshold was logged at least up to the horizon."""
    t, r = _check(times, reached, horizon)
    return bool(np.all(r | (t >= horizon)))


def restricted_times(times, reached, horizon: float) -> np.ndarray:
    """Each run's min(T, horizon) `[runs]`: a complete per-run score, defined when every run was followed
    to the horizon (the pair verdicts compare these; their mean is the RMST)."""
    t, r = _check(times, reached, horizon)
    if not followed_to_horizon(t, r, horizon):
        raise ValueError(f"a run stopped before step {horizon:g} without reaching the threshold: use a horizon "
                         "no later than the earliest last step")  # fmt: skip
    return np.minimum(t, horizon)


def _survival(t: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kaplan-Meier "not yet reached" curve: the observed times and S just after each (scipy's ecdf)."""
    if not r.any():
        return np.unique(t), np.ones(len(np.unique(t)))
    sf = stats.ecdf(stats.CensoredData(uncensored=t[r], right=t[~r])).sf
    return sf.quantiles, sf.probabilities


def _area(knots: np.ndarray, s: np.ndarray, start: float, end: float) -> float:
    """Integral of the right-continuous step curve (1 before the first knot, s[j] from knots[j]) over
    [start, end]."""
    before = np.flatnonzero(knots <= start)
    inside = (knots > start) & (knots < end)
    edges = np.concatenate([[start], knots[inside], [end]])
    heights = np.concatenate([[s[before[-1]] if len(before) else 1.0], s[inside]])
    return float(np.sum(heights * np.diff(edges)))


def restricted_mean(times, reached, horizon: float) -> float:
    """Area under the Kaplan-Meier "not yet reached" curve from step 0 to `horizon`."""
    t, r = _check(times, reached, horizon)
    return _area(*_survival(t, r), 0.0, horizon)


def _greenwood_se(t: np.ndarray, r: np.ndarray, horizon: float) -> float:
    """Standard error of the restricted mean: sqrt(sum over event times t_i <= tau of A_i^2 d_i / (n_i (n_i -
    d_i))), A_i the area under the curve from t_i to tau; a term with n_i = d_i has A_i = 0 and is left out."""
    knots, s = _survival(t, r)
    variance = 0.0
    for step in np.unique(t[r & (t <= horizon)]):
        at_risk, events = np.sum(t >= step), np.sum(r & (t == step))
        if at_risk > events:
            variance += _area(knots, s, step, horizon) ** 2 * events / (at_risk * (at_risk - events))
    return float(np.sqrt(variance))


def km_median(times, reached, horizon: float) -> float | None:
    """The first step where the Kaplan-Meier curve is at or below 1/2, if that is by `horizon`."""
    t, r = _check(times, reached, horizon)
    knots, s = _survival(t, r)
    below = np.flatnonzero((s <= 0.5) & (knots <= horizon))
    return float(knots[below[0]]) if len(below) else None


def time_to_threshold(times, reached, horizon: float, confidence: float = CONFIDENCE) -> TimeToThreshold:
    """The RMST of runs with first-reach (or censoring) steps `times` `[runs]` and flags `reached` `[runs]`."""
    t, r = _check(times, reached, horizon)
    value, runs = restricted_mean(t, r, horizon), len(t)
    hit = int(np.sum(r & (t <= horizon)))
    median = km_median(t, r, horizon)
    if followed_to_horizon(t, r, horizon):
        interval = mean_interval(np.minimum(t, horizon), confidence)
        low, high, method = interval.low, interval.high, "t interval over runs (all followed to the horizon)"
    else:
        half = stats.norm.ppf(0.5 + confidence / 2) * _greenwood_se(t, r, horizon)
        low, high, method = value - half, value + half, "normal interval, Greenwood variance (Kaplan-Meier)"
    if low is not None:  # the area lies in [0, horizon] whatever the seeds, and so does what it estimates
        low, high = float(np.clip(low, 0, horizon)), float(np.clip(high, 0, horizon))
    return TimeToThreshold(value, low, high, confidence, method, float(horizon), hit, runs, median)
