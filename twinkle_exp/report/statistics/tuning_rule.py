"""A tuning protocol's selection rule: each loss's best grid point from its tuning seeds' scores alone.

Pure: the scores come in as {grid point: {tuning seed: score}}; which runs they came from (and that no
verdict seed is among them) is `report.tuning`'s business. Rules:

- `max_mean`: the highest mean over the tuning seeds;
- `max_lower`: the highest mean minus one standard error (a point that won by luck on few seeds loses to
  a steadier one).

Ties go to the first point in the grid's order. A point missing a tuning seed is not comparable: refused,
naming it, rather than ranked on fewer seeds than the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

RULES = ("max_mean", "max_lower")


@dataclass(frozen=True)
class PointScore:
    point: tuple[tuple[str, str], ...]  # ((key, value), ...) in the grid's key order
    mean: float
    sd: float  # over the tuning seeds (0 with one)
    n: int
    values: tuple[float, ...] = ()  # each tuning seed's score, in the seeds' order

    @property
    def lower(self) -> float:
        return self.mean - (self.sd / np.sqrt(self.n) if self.n > 1 else 0.0)


def score_points(
    scores: Mapping[tuple[tuple[str, str], ...], Mapping[int, float]], seeds: Sequence[int]
) -> list[PointScore]:
    """Each grid point's mean and sd over `seeds`, in the order of `scores`; refuses a point that lacks one."""
    out = []
    for point, by_seed in scores.items():
        missing = [s for s in seeds if s not in by_seed]
        if missing:
            label = " ".join(f"{k}={v}" for k, v in point) or "(no grid)"
            raise ValueError(f"grid point {label} has no finished run of tuning seed(s) {missing}")
        values = np.array([by_seed[s] for s in seeds], dtype=float)
        sd = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        out.append(PointScore(point, float(values.mean()), sd, len(values), tuple(map(float, values))))
    return out


def select(points: list[PointScore], rule: str) -> PointScore:
    """The point `rule` picks (ties: the first)."""
    if rule not in RULES:
        raise ValueError(f"selection rule must be one of {RULES}, got {rule!r}")
    if not points:
        raise ValueError("no grid point to select from")
    key = (lambda p: p.mean) if rule == "max_mean" else (lambda p: p.lower)
    best = points[0]
    for p in points[1:]:
        if key(p) > key(best):
            best = p
    return best
