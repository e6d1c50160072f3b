"""A tuning protocol's sensitivity curves: each loss's tuning score against one grid key (the learning rate),
one line per value of its other keys (its own parameter), the band the span of the tuning seeds' scores,
and the chosen point ringed. Drawn from the tuning seeds alone, as the choice was."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from ..statistics.tuning_rule import PointScore


@dataclass(frozen=True)
class Curve:
    label: str  # the other keys' values, "loss.tau=0.5" ("" when the grid has only the x key)
    x: list[float]
    mean: list[float]
    low: list[float]  # the lowest tuning seed's score at each x
    high: list[float]


def sensitivity_curves(points: list[PointScore], x_key: str) -> list[Curve]:
    """`points` (one loss's grid, every point with `x_key`) as one curve per value of the other keys, in
    the grid's order, each sorted by x. ValueError when a point lacks `x_key`."""
    by_rest: dict[str, list[tuple[float, PointScore]]] = {}
    for p in points:
        given = dict(p.point)
        if x_key not in given:
            raise ValueError(
                f"grid point {p.point} has no {x_key}: the sensitivity curve needs it on every point"
            )
        rest = " ".join(f"{k}={v}" for k, v in p.point if k != x_key)
        by_rest.setdefault(rest, []).append((float(given[x_key]), p))
    curves = []
    for rest, xs in by_rest.items():
        xs.sort(key=lambda t: t[0])
        spans = [(min(p.values), max(p.values)) if p.values else (p.mean, p.mean) for _, p in xs]
        curves.append(
            Curve(
                rest,
                [x for x, _ in xs],
                [p.mean for _, p in xs],
                [lo for lo, _ in spans],
                [hi for _, hi in spans],
            )
        )
    return curves


def plot_sensitivity(
    points: Mapping[str, list[PointScore]],
    chosen: Mapping[str, PointScore],
    path: Path,
    x_key: str = "optim.lr",
    score: str = "score",
    seeds: int = 0,
) -> Path:
    """Write the curves of every loss of `points` ({loss: its grid's scores}) to `path`, one panel a loss,
    `chosen` ({loss: its chosen point}) ringed; `score` and `seeds` (tuning seeds) label the figure."""
    n = len(points)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(4.2 * cols, 3.4 * rows), dpi=110, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
    for ax, (loss, grid) in zip(axes.flat, points.items(), strict=False):
        curves = sensitivity_curves(grid, x_key)
        for curve in curves:
            (line,) = ax.plot(curve.x, curve.mean, marker="o", markersize=4, label=curve.label or loss)
            ax.fill_between(curve.x, curve.low, curve.high, color=line.get_color(), alpha=0.18, linewidth=0)
        best = chosen.get(loss)
        if best is not None:
            ax.plot(float(dict(best.point)[x_key]), best.mean, marker="o", markersize=11, fillstyle="none",
                    color="black", linestyle="none", label="chosen")  # fmt: skip
        ax.set_xscale("log")
        # The grid's own values as the ticks: a log axis's default minor labels crowd a short range.
        xs = sorted({x for curve in curves for x in curve.x})
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.minorticks_off()
        ax.set_title(loss)
        ax.set_xlabel(x_key)
        ax.grid(True, alpha=0.35)
        ax.legend(fontsize="x-small")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(score)
    fig.suptitle(
        f"Tuning sensitivity: {score} by grid point (line: mean over {seeds} tuning seeds; band: their span)"
    )
    fig.savefig(path)
    return path
