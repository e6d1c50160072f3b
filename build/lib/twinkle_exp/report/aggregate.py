"""Per-variant statistics over seeds: the table's numbers and the curves' mean and band.

Choices, stated once here and repeated in the report:
- The table's numbers come from finished runs only; running and failed runs are counted, not averaged.
- std is the sample standard deviation over seeds (n - 1 in the denominator); with one seed it is undefined.
- Curves use every run that logged the metric (running and failed ones up to where they stopped), so a sweep
  in progress can be watched.
- Seeds that logged at different steps are aligned on the union of their steps by forward-filling each run's
  last logged value, but only within that run's own first..last logged step: no value is invented before a
  run started logging or after it stopped. Forward-fill rather than interpolation because validation accuracy
  is a measurement at a step, and between two measurements the last one is what is known.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .runs import KL, VAL_ACCURACY, Run, Series


@dataclass
class Curve:
    """A metric of one variant on the union of its runs' steps. Arrays are `[num_steps]`."""

    steps: np.ndarray
    mean: np.ndarray
    low: np.ndarray  # min over the runs logged at that step
    high: np.ndarray  # max over the runs logged at that step
    num_runs: int  # runs that logged the metric at all


@dataclass
class VariantStats:
    label: str
    runs: list[Run]
    num_finished: int
    final_accuracy: list[float]  # last val/accuracy of each finished run that logged one
    steps_to_threshold: list[int]  # first step with val/accuracy >= threshold, finished runs that reached it
    final_kl: list[float]  # last train/kl of each finished run that logged one
    wall_times: list[float]  # wall time of each finished run that recorded one

    @property
    def num_total(self) -> int:
        return len(self.runs)

    @property
    def accuracy_mean(self) -> float | None:
        return mean(self.final_accuracy)

    @property
    def accuracy_std(self) -> float | None:
        return sample_std(self.final_accuracy)

    @property
    def steps_to_threshold_mean(self) -> float | None:
        return mean([float(s) for s in self.steps_to_threshold])

    @property
    def kl_mean(self) -> float | None:
        return mean(self.final_kl)

    @property
    def wall_time_mean(self) -> float | None:
        return mean(self.wall_times)


def group_by_variant(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs keyed by variant label, labels sorted, runs sorted by seed then name within a variant."""
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        groups[run.variant].append(run)
    return {
        label: sorted(groups[label], key=lambda r: (r.seed is None, r.seed or 0, r.name))
        for label in sorted(groups)
    }


def summarize(runs: list[Run], threshold: float) -> list[VariantStats]:
    stats = []
    for label, group in group_by_variant(runs).items():
        finished = [r for r in group if r.finished]
        accuracies = [r.metrics[VAL_ACCURACY] for r in finished if r.metrics.get(VAL_ACCURACY)]
        reached = [first_step_reaching(series, threshold) for series in accuracies]
        stats.append(
            VariantStats(
                label=label,
                runs=group,
                num_finished=len(finished),
                final_accuracy=[series[-1][1] for series in accuracies],
                steps_to_threshold=[s for s in reached if s is not None],
                final_kl=[r.metrics[KL][-1][1] for r in finished if r.metrics.get(KL)],
                wall_times=[r.wall_time_s for r in finished if r.wall_time_s is not None],
            )
        )
    return stats


def num_evaluated(stats: VariantStats) -> int:
    """Finished runs with a validation accuracy: the denominator of "reached the threshold"."""
    return len(stats.final_accuracy)


def first_step_reaching(series: Series, threshold: float) -> int | None:
    return next((step for step, value in series if value >= threshold), None)


def curve(series_list: list[Series]) -> Curve | None:
    """Mean and min..max band over runs, aligned as described in the module docstring; None if no data."""
    series_list = [s for s in series_list if s]
    if not series_list:
        return None
    steps = np.array(sorted({step for s in series_list for step, _ in s}))
    values = np.full((len(series_list), len(steps)), np.nan)
    for i, series in enumerate(series_list):
        run_steps = np.array([step for step, _ in series])
        run_values = np.array([value for _, value in series])
        inside = (steps >= run_steps[0]) & (steps <= run_steps[-1])
        last_logged = np.searchsorted(run_steps, steps[inside], side="right") - 1
        values[i, inside] = run_values[last_logged]
    # Every step of the union lies inside the range of the run that logged it: no column is all NaN.
    return Curve(
        steps=steps,
        mean=np.nanmean(values, axis=0),
        low=np.nanmin(values, axis=0),
        high=np.nanmax(values, axis=0),
        num_runs=len(series_list),
    )


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def sample_std(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
