"""Aggregates over a suite of tasks, as rliable computes them (Agarwal et al. 2021, "Deep Reinforcement
Learning at the Edge of the Statistical Precipice", arXiv 2108.13264), in numpy.

Scores are normalised per task so that tasks of different difficulty share one scale: 0 is the task's
warm-start (the mean first validation accuracy of its runs), 1 is every held-out prompt right, so a run's
normalised score is the share of the room above its warm-start it gained (negative when it lost ground).
Over the runs of a variant on every task (`[tasks][runs]`):

- IQM: the mean of the middle 50% of all its normalised scores (robust to a collapse on a few runs, less
  noisy than the median);
- optimality gap: the mean shortfall below 1 (max(0, 1 - score)): how far from solving the suite;
- average probability of improvement of X over Y: P(a run of X beats a run of Y on a task), ties half,
  averaged over tasks;
- performance profile: the share of its runs whose normalised score exceeds tau, for tau on a grid.

Intervals: the stratified percentile bootstrap (runs resampled with replacement within each task, tasks
kept), `RESAMPLES` resamples, as rliable does, with each task's resampled deviations widened by
sqrt(n / (n - 1)) (rliable's plain version undercovers at a few runs a task). Their coverage at a few runs per task is measured in
tests/test_report_suite.py and stated in docs/statistics.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

RESAMPLES = 2000
RNG_SEED = 0  # a report is reproducible
CONFIDENCE = 0.95


def normalise(scores, warm_start: float, best: float = 1.0) -> np.ndarray:
    """(score - warm_start) / (best - warm_start): 0 at the warm-start, 1 at `best`; refuses best <= warm."""
    if not best > warm_start:
        raise ValueError(f"a task's warm-start ({warm_start:g}) must lie below its best score ({best:g})")
    return (np.asarray(scores, dtype=float) - warm_start) / (best - warm_start)


def iqm(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean along `axis` (scipy's 25% trimmed mean)."""
    return stats.trim_mean(values, 0.25, axis=axis)


def optimality_gap(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(np.maximum(0.0, 1.0 - values), axis=axis)


def _resampled(per_task: Sequence[np.ndarray], rng: np.random.Generator, resamples: int) -> np.ndarray:
    """`[resamples, total runs]`: each task's runs resampled with replacement, tasks side by side, each
    resample's deviations from its task's mean widened by sqrt(n / (n - 1)): the plain bootstrap's variance
    of a mean of n runs is (n - 1) / n of the right one, which at 5 runs a task left the mean's interval at
    86% coverage (the rescaled bootstrap; tests/test_report_suite.py)."""
    parts = []
    for x in per_task:
        draws = x[rng.integers(0, len(x), (resamples, len(x)))]
        if len(x) > 1:
            draws = x.mean() + np.sqrt(len(x) / (len(x) - 1)) * (draws - x.mean())
        parts.append(draws)
    return np.concatenate(parts, axis=1)


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float


def _interval(point: float, draws: np.ndarray, confidence: float) -> Estimate:
    tail = (1 - confidence) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    return Estimate(float(point), float(low), float(high))


def aggregate(
    per_task: Sequence[Sequence[float]],
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = RNG_SEED,
) -> dict[str, Estimate]:
    """{"IQM", "mean", "optimality gap"} of one variant's normalised scores (`per_task[t]`: its runs on task
    t), each with its stratified bootstrap interval."""
    tasks = [np.asarray(x, dtype=float) for x in per_task]
    if not tasks or any(len(x) < 1 for x in tasks):
        raise ValueError("every task needs at least one run of the variant")
    pooled = np.concatenate(tasks)
    draws = _resampled(tasks, np.random.default_rng(seed), resamples)
    return {
        "IQM": _interval(float(iqm(pooled)), iqm(draws), confidence),
        "mean": _interval(float(pooled.mean()), draws.mean(axis=1), confidence),
        "optimality gap": _interval(float(optimality_gap(pooled)), optimality_gap(draws), confidence),
    }


def _prob_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) + P(X = Y) / 2 over the last axis of x `[..., n]` and y `[..., m]`."""
    return np.mean(np.sign(x[..., :, None] - y[..., None, :]) + 1, axis=(-2, -1)) / 2


def average_probability_of_improvement(
    first: Sequence[Sequence[float]],
    second: Sequence[Sequence[float]],
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = RNG_SEED,
) -> Estimate:
    """P(a run of `first` beats a run of `second` on a task), averaged over the tasks (both `[tasks][runs]`,
    task t of one against task t of the other), with its stratified bootstrap interval."""
    if len(first) != len(second) or not first:
        raise ValueError("both variants need runs on the same tasks")
    rng = np.random.default_rng(seed)
    point, draws = [], []
    for x, y in zip(first, second, strict=True):
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        point.append(_prob_improvement(x, y))
        rx = x[rng.integers(0, len(x), (resamples, len(x)))]
        ry = y[rng.integers(0, len(y), (resamples, len(y)))]
        draws.append(_prob_improvement(rx, ry))
    return _interval(float(np.mean(point)), np.mean(draws, axis=0), confidence)


def performance_profile(per_task: Sequence[Sequence[float]], taus: np.ndarray) -> np.ndarray:
    """`[len(taus)]`: the share of the variant's runs (every task's, each task weighted equally) whose
    normalised score exceeds each tau."""
    return np.mean(
        [np.mean(np.asarray(x, dtype=float)[:, None] > taus[None, :], axis=0) for x in per_task], axis=0
    )
