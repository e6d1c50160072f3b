"""A curve's area on a declared grid of steps, so that how often a run validated does not change its score.

The accuracy AUC of a run is the mean of its validation curve over a span of steps. Integrating the logged
points directly ties the score to the run's own validation steps: its span ends at its last validation,
which moves with `trainer.val_every`, and runs with different spacings integrate different spans. Here every
run's curve is interpolated linearly between its validations onto one grid (every step of a span all the
runs cover) and integrated by the trapezoid rule there, divided by the span. The grid holds every integer
step, so the result is the exact area under the linear interpolant; two spacings of one underlying curve
then differ by interpolation error alone, at most h^2 / 12 * max|f''| for validations h steps apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GridSpan:
    """The span [low, high] every run covers, and which runs (by index) fall short of the union of spans."""

    low: float
    high: float
    short: tuple[int, ...]

    @property
    def shared(self) -> bool:
        """True when every run covers the same span: one grid serves them all without cutting any."""
        return not self.short and self.high > self.low


def grid_span(ranges: Sequence[tuple[float, float]]) -> GridSpan:
    """The common span of runs whose curves run from first to last step (`ranges`: one (first, last) each)."""
    if not ranges:
        raise ValueError("no runs to put on a grid")
    first = np.array([a for a, _ in ranges], dtype=float)
    last = np.array([b for _, b in ranges], dtype=float)
    if np.any(last < first):
        raise ValueError(f"a step range ends before it starts: {list(ranges)}")
    low, high = float(first.max()), float(last.min())
    short = tuple(int(i) for i in np.flatnonzero((first > first.min()) | (last < last.max())))
    return GridSpan(low, high, short)


def step_grid(low: float, high: float) -> np.ndarray:
    """Every integer step from `low` to `high`, both included."""
    if not high > low:
        raise ValueError(f"a grid needs a span of steps, got [{low:g}, {high:g}]")
    return np.arange(np.ceil(low), np.floor(high) + 1, dtype=float)


def auc_on_grid(steps, values, grid) -> float:
    """Mean of the curve (`steps` `[k]`, increasing; `values` `[k]`) over `grid` `[g]`: the trapezoid area
    of its linear interpolation on the grid, divided by the grid's span. The grid must lie within the steps."""
    steps, values, grid = (np.asarray(a, dtype=float).reshape(-1) for a in (steps, values, grid))
    if len(steps) != len(values) or len(steps) < 2 or np.any(np.diff(steps) <= 0):
        raise ValueError("a curve needs at least 2 points at increasing steps, one value per step")
    if len(grid) < 2 or np.any(np.diff(grid) <= 0):
        raise ValueError("a grid needs at least 2 increasing steps")
    if grid[0] < steps[0] or grid[-1] > steps[-1]:
        raise ValueError(
            f"the grid [{grid[0]:g}, {grid[-1]:g}] leaves the curve's steps [{steps[0]:g}, {steps[-1]:g}]: "
            "nothing is known there to interpolate"
        )
    return float(np.trapezoid(np.interp(grid, steps, values), grid) / (grid[-1] - grid[0]))
