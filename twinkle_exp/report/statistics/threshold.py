"""Steps to an accuracy threshold from runs' curves, censoring-aware: one function for the report's table and
for the findings' steps-to-level claims, so the two never count a run that never got there differently.

A run that never reached the threshold is censored at its last logged step (`censoring.first_reach`). Up to
a horizon that every run was followed to (by default the earliest last step of the runs compared), each
run's restricted time min(T, horizon) is complete data: its mean is the restricted mean time to the
threshold (RMST, `censoring.time_to_threshold`), and per-run values go through a comparison like any score.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from twinkle_exp.tracking.metrics_csv import Series

from .censoring import TimeToThreshold, first_reach, restricted_times, time_to_threshold


def reach(series_list: Sequence[Series], threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """(steps `[runs]`, reached `[runs]`): each curve's first step at or above `threshold`, or its last step
    and False (censored there)."""
    pairs = [first_reach([s for s, _ in c], [v for _, v in c], threshold) for c in series_list]
    return np.array([t for t, _ in pairs], dtype=float), np.array([r for _, r in pairs], dtype=bool)


def common_horizon(series_list: Sequence[Series]) -> float:
    """The earliest last logged step of the curves: every run was followed at least that far."""
    if not series_list or any(not c for c in series_list):
        raise ValueError("steps to threshold need at least one logged curve per run")
    return float(min(c[-1][0] for c in series_list))


def steps_to_threshold(
    series_list: Sequence[Series], threshold: float, horizon: float | None = None
) -> TimeToThreshold:
    """The RMST of the curves' steps to `threshold` within `horizon` (default: `common_horizon`), with its
    interval, the runs that reached it and the Kaplan-Meier median."""
    times, reached = reach(series_list, threshold)
    horizon = common_horizon(series_list) if horizon is None else horizon
    return time_to_threshold(times, reached, max(horizon, 1.0))


def restricted_steps(series_list: Sequence[Series], threshold: float, horizon: float) -> list[float]:
    """Each run's min(steps to `threshold`, `horizon`): a never-reached run counts as the horizon."""
    times, reached = reach(series_list, threshold)
    return restricted_times(times, reached, max(horizon, 1.0)).tolist()
