"""Equivalence within a declared margin: two one-sided tests (TOST, Schuirmann 1987).

Two variants are equivalent within +-margin when both "difference <= -margin" and "difference >= +margin" are
rejected; the TOST p is the larger of the two one-sided p-values, and p < alpha is the same as the
(1 - 2 alpha) t interval lying inside (-margin, +margin). The t is the verdict's: Welch's unpaired, or the
paired t on per-seed differences. Margins are in the scores' own units: fractions in [0, 1] for accuracy
and AUC (the report shows them x100), so 2 points is 0.02.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .intervals import TSummary, as_scores, t_bounds, t_p_value, welch_summary
from .paired import paired_scores, paired_summary

ALPHA = 0.05


@dataclass(frozen=True)
class Equivalence:
    """A TOST at `margin`: its p (the larger one-sided p), both one-sided p's, and the (1 - 2 alpha)
    interval whose inclusion in (-margin, margin) it is equivalent to."""

    margin: float
    p: float
    p_lower: float  # H0: difference <= -margin
    p_upper: float  # H0: difference >= +margin
    low: float
    high: float
    alpha: float

    @property
    def equivalent(self) -> bool:
        return self.p < self.alpha


def tost_p_values(s: TSummary, margin: float) -> tuple:
    """(p, p_lower, p_upper) of the TOST at `margin` from a t summary (arrays along any shape)."""
    margin = check_margin(margin)
    p_lower = t_p_value(s, -margin, "greater")
    p_upper = t_p_value(s, margin, "less")
    return np.maximum(p_lower, p_upper)[()], p_lower, p_upper


def check_margin(margin: float) -> float:
    margin = float(margin)
    if not (np.isfinite(margin) and margin > 0):
        raise ValueError(f"an equivalence margin must be a positive number, got {margin}")
    return margin


def equivalence_from_summary(s: TSummary, margin: float, alpha: float = ALPHA) -> Equivalence:
    """The TOST of a t summary of a difference at `margin` and level `alpha`."""
    p, p_lower, p_upper = tost_p_values(s, margin)
    low, high = t_bounds(s, 1 - 2 * alpha)
    return Equivalence(
        float(margin), float(p), float(p_lower), float(p_upper), float(low), float(high), alpha
    )


def equivalence_test(x, y, margin: float, paired: bool = False, alpha: float = ALPHA) -> Equivalence:
    """TOST of mean(x) - mean(y) within +-margin: Welch's t for independent samples `[n]`, `[m]`, the paired
    t when `paired` (same seeds, in the same order). Needs 2 seeds a side."""
    x, y = paired_scores(x, y) if paired else (as_scores(x), as_scores(y))
    if min(len(x), len(y)) < 2:
        raise ValueError(f"an equivalence test needs 2 seeds on each side, got {len(x)} vs {len(y)}")
    s = paired_summary(x, y) if paired else welch_summary(x, y)
    return equivalence_from_summary(s, margin, alpha)
