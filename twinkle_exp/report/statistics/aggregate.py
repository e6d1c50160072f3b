"""Per-variant figures over seeds: scores (area under the accuracy curve, final accuracy, any metric's end
level) with t intervals of their means, steps to threshold (censoring-aware), KL, wall time, and each
metric's curve with a band.

Choices, stated once here and repeated in the report's method notes:
- The table's numbers come from finished runs only; running and failed runs are counted, not averaged.
- Final accuracy: a run's last val/accuracy. AUC (sample efficiency): the mean of val/accuracy over the
  span of optimizer steps that every finished run of the report covers, each run's curve interpolated
  linearly between its validations onto that span's integer steps (`step_grid`): how often a run validated
  (`trainer.val_every`) does not change it, and every run is scored over the same steps.
- Means get Student's t interval over seeds (`intervals.mean_interval`); the IQM (mean of the middle 50%)
  is shown as a point beside it, a robust summary with no interval of its own.
- Steps to threshold: the restricted mean steps to the threshold within the earliest last step of the
  finished runs (`threshold`), every run counted (one that never got there counts as the horizon), with
  how many reached it.
- Curves use every run that logged the metric (running and failed ones up to where they stopped), so a sweep
  in progress can be watched. Seeds that logged at different steps are aligned on the union of their steps
  by forward-filling each run's last logged value, only within that run's own first..last logged step: no
  value is invented before a run started logging or after it stopped. Forward-fill rather than interpolation
  because validation accuracy is a measurement at a step, and between two measurements the last one is what
  is known. The band is the t interval of the mean at each step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import special, stats

from twinkle_exp import metric_names as M
from twinkle_exp.summary.series import last_quarter_mean, last_value
from twinkle_exp.summary.step_grid import GridSpan, auc_on_grid, grid_span, step_grid

from ..loading.grouping import group_by_variant
from ..loading.runs import Run, Series
from .censoring import TimeToThreshold
from .intervals import CONFIDENCE, Interval, mean_interval
from .threshold import common_horizon, steps_to_threshold


@dataclass
class Curve:
    """A metric of one variant on the union of its runs' steps. Arrays are `[num_steps]`."""

    steps: np.ndarray
    mean: np.ndarray  # mean over the runs logged at that step
    low: np.ndarray  # 95% t interval of that mean; NaN where fewer than 2 runs logged the step
    high: np.ndarray
    num_runs: int  # runs that logged the metric at all


@dataclass(frozen=True)
class Score:
    """A number per run that variants are compared on, computed from one metric's series.

    fn: the run's series of `key` -> its score; None for a score on the shared step grid (the AUC), which
    needs the span every compared run covers and is computed by `grid_scores`.
    """

    name: str  # as the report shows it
    key: str  # the metric it is computed from
    fn: Callable[[Series], float] | None
    scale: float = 1.0  # shown x scale: 100 for fractions shown in %
    unit: str = ""  # "%" when scale is 100; differences are then in percentage points
    bounds: tuple[float, float] | None = None  # the range a mean can take: its interval is cut to it


FINAL_ACCURACY = Score("final accuracy", M.VAL_ACCURACY, last_value, 100.0, "%", (0.0, 1.0))
AUC = Score("AUC", M.VAL_ACCURACY, None, 100.0, "%", (0.0, 1.0))
# AUC first: the headline. Final accuracy saturates when every variant reaches the task's ceiling within the
# budget (issue 20: every loss ended at 77% on reverse); the area under the curve still tells them apart by
# how fast they got there.
DEFAULT_SCORES = (AUC, FINAL_ACCURACY)


def metric_score(key: str) -> Score:
    """`--score KEY`: any logged metric, compared by its mean over the last quarter of each run's steps."""
    return Score(f"{key} (last quarter)", key, last_quarter_mean)


@dataclass
class VariantStats:
    """One variant's per-seed figures (lists over its finished runs, in seed order) and their estimates."""

    label: str
    runs: list[Run]
    num_finished: int
    scores: dict[str, list[float]]  # score name -> one value per finished run that logged the score's metric
    scored: dict[str, list[Run]]  # score name -> the runs behind `scores`, in the same order
    evaluated: int  # finished runs that logged val/accuracy: the denominator of "reached the threshold"
    final_kl: list[float]  # last train/kl of each finished run that logged one
    wall_times: list[float]  # wall time of each finished run that recorded one
    threshold: TimeToThreshold | None = None  # steps to the threshold; None without a validated run
    estimates: dict[str, Interval] = field(default_factory=dict)  # score name -> mean with its t interval
    iqm: dict[str, float] = field(default_factory=dict)  # score name -> interquartile mean

    @property
    def final_accuracy(self) -> list[float]:
        """The final-accuracy score of each finished, validated run, in seed order."""
        return self.scores.get(FINAL_ACCURACY.name, [])

    @property
    def num_total(self) -> int:
        """Every run of the variant, whatever its status."""
        return len(self.runs)

    @property
    def kl_mean(self) -> float | None:
        """Mean final train/kl over the finished runs that logged it, None if none did."""
        return mean(self.final_kl)

    @property
    def wall_time_mean(self) -> float | None:
        """Mean wall time in seconds over the finished runs that recorded one."""
        return mean(self.wall_times)


def iqm(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean along `axis`: the mean of the middle 50% (scipy's trim_mean, 25% cut each side).

    With fewer than 4 values nothing is cut, so it equals the mean.
    """
    return stats.trim_mean(x, 0.25, axis=axis)


def bounded(e: Interval, bounds: tuple[float, float] | None) -> Interval:
    """The interval cut to the range the mean can take (an accuracy's in [0, 1]): what lies outside holds no
    possible value, so the cut loses no coverage. With 2-3 seeds a t interval is wide enough to reach out."""
    if bounds is None or e.low is None:
        return e
    return replace(e, low=float(np.clip(e.low, *bounds)), high=float(np.clip(e.high, *bounds)))


def finished_in_seed_order(runs: list[Run]) -> list[Run]:
    return sorted((r for r in runs if r.finished), key=lambda r: (r.seed is None, r.seed or 0, r.name))


def grid_spans(runs: list[Run], scores: tuple[Score, ...]) -> dict[str, GridSpan]:
    """Score name -> the span of steps every finished run that logged its metric covers (grid scores only)."""
    spans = {}
    for score in scores:
        curves = [r.metrics[score.key] for r in runs if r.finished and r.metrics.get(score.key)]
        if score.fn is None and curves:
            span = grid_span([(c[0][0], c[-1][0]) for c in curves])
            if span.high < span.low:
                raise ValueError(
                    f"{score.name}: the finished runs' {score.key} curves share no span of steps (one ends at "
                    f"step {span.high:g}, another starts at {span.low:g}): nothing to compare them over"
                )
            spans[score.name] = span
    return spans


def grid_score(series: Series, span: GridSpan) -> float:
    """The curve's mean over the shared span (its value there when the span is a single step)."""
    steps = [s for s, _ in series]
    values = [v for _, v in series]
    if span.high == span.low:
        return float(np.interp(span.low, steps, values))
    return auc_on_grid(steps, values, step_grid(span.low, span.high))


def summarize(
    runs: list[Run], threshold: float, scores: tuple[Score, ...] = DEFAULT_SCORES
) -> list[VariantStats]:
    """One VariantStats per variant, with the t interval and IQM of every score; grid scores (the AUC) and
    steps to threshold over what every finished run of `runs` covers."""
    spans = grid_spans(runs, scores)
    accuracy = [r.metrics[M.VAL_ACCURACY] for r in runs if r.finished and r.metrics.get(M.VAL_ACCURACY)]
    horizon = common_horizon(accuracy) if accuracy else None
    out = []
    for label, group in group_by_variant(runs).items():
        finished = finished_in_seed_order(group)
        scored = {sc.name: [r for r in finished if r.metrics.get(sc.key)] for sc in scores}
        values = {
            sc.name: [
                sc.fn(r.metrics[sc.key])
                if sc.fn is not None
                else grid_score(r.metrics[sc.key], spans[sc.name])
                for r in scored[sc.name]
            ]
            for sc in scores
        }
        curves = [r.metrics[M.VAL_ACCURACY] for r in finished if r.metrics.get(M.VAL_ACCURACY)]
        s = VariantStats(
            label=label,
            runs=group,
            num_finished=len(finished),
            scores=values,
            scored=scored,
            evaluated=len(curves),
            final_kl=[r.metrics[M.KL][-1][1] for r in finished if r.metrics.get(M.KL)],
            wall_times=[r.wall_time_s for r in finished if r.wall_time_s is not None],
            threshold=steps_to_threshold(curves, threshold, horizon) if curves else None,
        )
        for sc in scores:
            if values[sc.name]:
                s.estimates[sc.name] = bounded(mean_interval(values[sc.name]), sc.bounds)
                s.iqm[sc.name] = float(iqm(np.asarray(values[sc.name])))
        out.append(s)
    return out


def mean_band(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """The t interval of the mean over seeds at every step.

    values: `[n_seeds, n_steps]`, NaN where a seed did not log that step. Returns `(low, high)`, each
    `[n_steps]`; NaN where fewer than 2 seeds logged the step.
    """
    values = np.asarray(values, dtype=float)
    n = np.sum(~np.isnan(values), axis=0)
    enough = n >= 2
    low, high = np.full(values.shape[1], np.nan), np.full(values.shape[1], np.nan)
    block = values[:, enough]
    centre = np.nanmean(block, axis=0)
    half = special.stdtrit(n[enough] - 1, 0.5 + confidence / 2) * np.nanstd(block, axis=0, ddof=1)
    half /= np.sqrt(n[enough])
    low[enough], high[enough] = centre - half, centre + half
    return low, high


def curve(series_list: list[Series]) -> Curve | None:
    """Mean and band over runs, aligned as described in the module docstring; None if no data."""
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
    low, high = mean_band(values)
    return Curve(steps=steps, mean=np.nanmean(values, axis=0), low=low, high=high, num_runs=len(series_list))


def mean(values: list[float]) -> float | None:
    """Arithmetic mean, None for an empty list."""
    return sum(values) / len(values) if values else None
