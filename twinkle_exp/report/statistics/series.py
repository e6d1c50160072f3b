"""One run's series of a metric to one number: its last value, its level over the last quarter of the logged
steps, the area under it, the first step it reaches a threshold. Pure functions of `Series` (step, value).
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import trapezoid

from ..loading.metrics_csv import Series


def values(series: Series) -> np.ndarray:
    """The logged values, `[num_logged_steps]`."""
    return np.array([v for _, v in series])


def quarter(series: Series) -> int:
    """How many logged steps a quarter of `series` holds: at least one."""
    return max(1, len(series) // 4)


def first_quarter(series: Series) -> Series:
    return series[: quarter(series)]


def last_quarter(series: Series) -> Series:
    return series[-quarter(series) :]


def last_value(series: Series) -> float:
    """The last logged value."""
    return series[-1][1]


def last_quarter_mean(series: Series) -> float:
    """Mean over the last quarter of the logged steps (at least one): an end-of-run level, less noisy than
    the last value for a metric logged every step."""
    return float(np.mean(values(last_quarter(series))))


def accuracy_auc(series: Series) -> float:
    """Area under (step, accuracy) by the trapezoid rule, over the first..last step: the mean accuracy
    over training. A single validation gives its own value."""
    steps = np.array([step for step, _ in series], dtype=float)
    logged = np.array([value for _, value in series], dtype=float)
    if len(series) == 1 or steps[-1] == steps[0]:
        return float(logged[-1])
    return float(trapezoid(logged, steps) / (steps[-1] - steps[0]))


def first_step_reaching(series: Series, threshold: float) -> int | None:
    """The first step whose value is >= threshold, or None."""
    return next((step for step, value in series if value >= threshold), None)
