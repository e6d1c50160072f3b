"""The family of tests a report actually runs (pairs x scores), and its adjusted p-values.

Holm (the default) controls the family-wise error rate, the chance of even one false call among all the
pairs and scores, under any dependence between the tests (the scores of one run are correlated). Benjamini-
Hochberg (an option, scipy's `false_discovery_control`) controls the expected share of false calls among the
calls made; it is valid for independent or positively dependent tests. A family of one (a finding's single
pre-declared primary test) is not adjusted: every method returns its p unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import stats

METHODS = ("holm", "bh", "none")
METHOD_NAMES = {"holm": "Holm", "bh": "Benjamini-Hochberg", "none": "no adjustment"}


def adjust(p_values, method: str = "holm") -> np.ndarray:
    """Adjusted p-values `[k]` of the family's raw p-values `[k]`, in the same order.

    holm: the i-th smallest p times (k - i + 1) (i from 1), made non-decreasing in that order, capped at 1.
    bh: the i-th smallest p times k / i, made non-increasing from the largest down (scipy).
    """
    p = np.asarray(p_values, dtype=float).reshape(-1)
    if method not in METHODS:
        raise ValueError(f"unknown adjustment {method!r}: choose one of {', '.join(METHODS)}")
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"p-values must lie in [0, 1], got {p.tolist()}")
    if method == "none" or len(p) <= 1:
        return p.copy()
    if method == "bh":
        return stats.false_discovery_control(p, method="bh")
    order = np.argsort(p, kind="stable")
    factors = len(p) - np.arange(len(p))
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(factors * p[order]))
    return adjusted


@dataclass(frozen=True)
class Family:
    """The tests adjusted together: one member per (first variant, second variant, score) tested.

    A report's family is every pair on every score it compares (15 pairs x 2 scores = 30 for six variants);
    a pair left untested (too few seeds) is not a member, so `size` counts what was actually tested.
    """

    name: str
    members: tuple[tuple[str, str, str], ...]  # (first, second, score)
    method: str = "holm"

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"unknown adjustment {self.method!r}: choose one of {', '.join(METHODS)}")
        if len(set(self.members)) != len(self.members):
            raise ValueError(f"family {self.name!r} lists a test twice")

    @classmethod
    def of(cls, name: str, pairs: Iterable[tuple[str, str]], scores: Iterable[str], method: str = "holm"):
        """Every pair on every score."""
        scores = tuple(scores)
        return cls(name, tuple((a, b, s) for s in scores for a, b in pairs), method)

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        # Unordered: a report orients each pair by the higher mean, which may differ from score to score.
        return tuple(dict.fromkeys(tuple(sorted((a, b))) for a, b, _ in self.members))

    @property
    def scores(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s for _, _, s in self.members))

    def per_test_alpha(self, alpha: float) -> float:
        """The level a single test is held to before any other is rejected (Holm's first step, and
        Benjamini-Hochberg's when only one is): the level the minimum detectable effect is computed at."""
        return alpha / max(1, self.size) if self.method != "none" else alpha

    def describe(self) -> str:
        """ "six_losses: 15 pairs x 2 scores = 30 tests, Holm" (or "29 tests over 15 pairs and 2 scores")."""
        pairs, scores = len(self.pairs), len(self.scores)
        shape = f"{pairs} {'pair' if pairs == 1 else 'pairs'} x {scores} {'score' if scores == 1 else 'scores'} = {self.size} tests"
        if pairs * scores != self.size:
            shape = f"{self.size} tests over {pairs} pairs and {scores} scores"
        if self.size == 1:
            return f"{self.name}: 1 test, a single pre-declared primary test, not adjusted"
        return f"{self.name}: {shape}, {METHOD_NAMES[self.method]}"

    def adjust(self, p_values) -> np.ndarray:
        """Adjusted p-values of the members' raw p-values, given in `members` order."""
        p = np.asarray(p_values, dtype=float).reshape(-1)
        if len(p) != self.size:
            raise ValueError(f"family {self.name!r} has {self.size} tests, got {len(p)} p-values")
        return adjust(p, self.method)
