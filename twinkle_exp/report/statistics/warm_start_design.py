"""The warm-start as a design factor: runs that differ only in `warmup.seed` (and `seed`) are one variant run
from several warm-starts, and a verdict about the variants should hold across warm-starts, not for one.

Model: the score of variant v, warm-start w, RL seed s is mu_v + b_vw + e_vws, with b_vw the warm-start's
effect on that variant (random, mean 0: a warm-start is drawn, not chosen) and e the RL noise. The difference
of two variants at warm-start w, averaged over its seeds, is D_w = (mu_a - mu_b) + (b_aw - b_bw) + noise:
independent over warm-starts, with one variance that holds both the warm-start part and the seeds' part.
So the across-warm-start estimate is the mean of the D_w and its test the t on the D_w's, with W - 1 degrees
of freedom (the two-stage, "summary measures" analysis of the mixed model: exact for a balanced design with
normal effects, and it never counts the seeds of one warm-start as independent evidence about another).
`pair_verdicts` does exactly this when each variant's "seeds" are its per-warm-start means, paired by
warm-start; the exact sign-flip test then runs over warm-starts too, whose floor 2 / 2^W (0.25 at 3
warm-starts) says how many warm-starts a call needs. Coverage: docs/statistics.md (measured by
`python tests/stats_simulation.py`).

Per-warm-start figures (each warm-start's runs compared on their own: paired by seed where they pair) are a
breakdown beside those verdicts, every row marked with its warm-start, and adjusted as their own family.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np

from twinkle_exp.tracking.run_json import override_key

from .aggregate import Score, VariantStats
from .comparisons import Comparisons, pair_data
from .multiplicity import Family
from .verdicts import ALPHA, DEFAULT_MARGINS, PairData, pair_verdicts
from .warm_starts import WARMUP_SEED, warm_start_of

ACROSS_TEST = "paired t over warm-start means"
BREAKDOWN_FAMILY = "per warm-start breakdown"


def across(levels: int) -> str:
    """The population an across-warm-start verdict speaks for."""
    return f"across {levels} warm-starts (warm-start as a random effect)"


def this_warm_start(level: str | None) -> str:
    """The population of a verdict on one warm-start's runs."""
    return "this warm-start" + ("" if level is None else f" (warmup.seed={level})")


def without_warm_start(label: str) -> str:
    """A variant label less its `warmup.seed=...` part ("default" when nothing is left)."""
    kept = [part for part in label.split(", ") if override_key(part) != WARMUP_SEED]
    return ", ".join(kept) or "default"


@dataclass(frozen=True)
class WarmStartDesign:
    """The variants as cells of pooled variant x warm-start.

    cells: pooled label -> warm-start (its warmup.seed, as text) -> that cell's VariantStats.
    """

    levels: tuple[str, ...]
    cells: dict[str, dict[str, VariantStats]]

    def describe(self) -> str:
        return f"{len(self.cells)} variants x {len(self.levels)} warm-starts (warmup.seed={', '.join(self.levels)})"


def warm_start_level(stats: VariantStats) -> str | None:
    """The one warm-start all of a variant's runs started from; None when they say none or several."""
    levels = {warm_start_of(r) for r in stats.runs}
    return levels.pop() if len(levels) == 1 else None


def design_of(stats: list[VariantStats]) -> WarmStartDesign | None:
    """The warm-start design of the variants, or None when the runs come from one warm-start (or a variant
    mixes warm-starts in its own runs: that is a provenance mix, not a design)."""
    levels = [warm_start_level(s) for s in stats]
    if None in levels or len(set(levels)) < 2:
        return None
    cells: dict[str, dict[str, VariantStats]] = defaultdict(dict)
    for s, level in zip(stats, levels, strict=True):
        cells[without_warm_start(s.label)][level] = s
    ordered = tuple(sorted(set(levels), key=lambda v: (len(v), v)))
    return WarmStartDesign(ordered, dict(sorted(cells.items())))


def pooled_names(stats: list[VariantStats], names: Mapping[str, str]) -> dict[str, str]:
    """Pooled label -> its short name (the legend's name less the warm-start)."""
    return {without_warm_start(s.label): without_warm_start(names.get(s.label, s.label)) for s in stats}


def _cell_mean(cell: VariantStats | None, score: Score) -> float | None:
    values = [] if cell is None else cell.scores.get(score.name, [])
    return float(np.mean(values)) if values else None


def compare_across(
    design: WarmStartDesign,
    scores: tuple[Score, ...],
    names: Mapping[str, str],
    *,
    family_name: str,
    margins: Mapping[str, float] = DEFAULT_MARGINS,
    method: str = "holm",
    alpha: float = ALPHA,
) -> Comparisons:
    """Every pair of pooled variants on every score, across the warm-starts both were run from (2 or more):
    the per-warm-start means of each side paired by warm-start, one family adjusted by `method`."""
    members, counts, untested = [], [], []
    for score in scores:
        for a, b in combinations(design.cells, 2):
            shared = [
                w
                for w in design.levels
                if _cell_mean(design.cells[a].get(w), score) is not None
                and _cell_mean(design.cells[b].get(w), score) is not None
            ]
            name_a, name_b = names.get(a, a), names.get(b, b)
            if len(shared) < 2:
                untested.append(
                    f"{name_a} vs {name_b} on {score.name}: {len(shared)} shared warm-start(s), too few for a "
                    "test across warm-starts (2); see the per warm-start breakdown"
                )
                continue
            xa = [_cell_mean(design.cells[a][w], score) for w in shared]
            xb = [_cell_mean(design.cells[b][w], score) for w in shared]
            first, second, x, y = (
                (name_a, name_b, xa, xb) if np.mean(xa) >= np.mean(xb) else (name_b, name_a, xb, xa)
            )
            members.append(PairData(first, second, score.name, tuple(x), tuple(y), paired=True))
            counts.append(len(shared))
    family, verdicts = pair_verdicts(members, family_name, margins=margins, alpha=alpha, method=method)
    verdicts = [
        replace(v, test=ACROSS_TEST, population=across(n)) for v, n in zip(verdicts, counts, strict=True)
    ]
    return Comparisons(family, verdicts, {s.name: s for s in scores}, alpha, dict(margins), untested)


def compare_per_warm_start(
    design: WarmStartDesign,
    scores: tuple[Score, ...],
    names: Mapping[str, str],
    *,
    margins: Mapping[str, float] = DEFAULT_MARGINS,
    method: str = "holm",
    alpha: float = ALPHA,
) -> Comparisons:
    """The breakdown: every pair of pooled variants on every score within each warm-start (2 seeds a side;
    paired by seed where the runs pair up), adjusted as one family of its own; every row marked with its
    warm-start and population."""
    members, levels, untested = [], [], []
    for level in design.levels:
        for score in scores:
            for a, b in combinations(design.cells, 2):
                cell_a, cell_b = design.cells[a].get(level), design.cells[b].get(level)
                if cell_a is None or cell_b is None:
                    continue
                n, m = len(cell_a.scores.get(score.name, [])), len(cell_b.scores.get(score.name, []))
                if min(n, m) < 2:
                    if n and m:
                        untested.append(
                            f"{names.get(a, a)} vs {names.get(b, b)} on {score.name} at warmup.seed={level}: "
                            f"{n} vs {m} seeds, too few for a test (2 a side)"
                        )
                    continue
                cell_names = {cell_a.label: names.get(a, a), cell_b.label: names.get(b, b)}
                members.append(pair_data(score, cell_a, cell_b, cell_names))
                levels.append(level)
    if not members:
        return Comparisons(Family(BREAKDOWN_FAMILY, (), method), [], {s.name: s for s in scores}, alpha)
    # Members of one family must be distinct: the warm-start rides in the score's name for the adjustment.
    keyed = [replace(d, score=f"{d.score}@{w}") for d, w in zip(members, levels, strict=True)]
    keyed_margins = {f"{name}@{w}": value for name, value in margins.items() for w in design.levels}
    family, verdicts = pair_verdicts(
        keyed, BREAKDOWN_FAMILY, margins=keyed_margins, alpha=alpha, method=method
    )
    verdicts = [
        replace(v, score=d.score, warm_start=w, population=this_warm_start(w))
        for v, d, w in zip(verdicts, members, levels, strict=True)
    ]
    return Comparisons(family, verdicts, {s.name: s for s in scores}, alpha, dict(margins), untested)
