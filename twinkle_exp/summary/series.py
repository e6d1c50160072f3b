"""One run's series of a metric to one number: its last value, its level over the last quarter of the logged
steps, the area under it, the first step it reaches a threshold. Pure functions of `Series` (step, value).
"""

from __future__ import annotations

import numpy as np

from twinkle_exp.tracking.metrics_csv import Series

from .step_grid import auc_on_grid, step_grid

DEFAULT_THRESHOLD = 0.5  # the validation accuracy of steps-to-threshold: the report's and the run's summary


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
    """One run's mean accuracy over its own first..last validation step, on the step grid (`step_grid`; the
    report scores a sweep's runs over the span they all cover instead). A single validation gives its value."""
    steps = [step for step, _ in series]
    logged = [value for _, value in series]
    if len(series) == 1 or steps[-1] == steps[0]:
        return float(logged[-1])
    return auc_on_grid(steps, logged, step_grid(steps[0], steps[-1]))


def first_step_reaching(series: Series, threshold: float) -> int | None:
    """The first step whose value is >= threshold, or None."""
    return next((step for step, value in series if value >= threshold), None)
