"""The report's family of tests: every pair of variants on every score, each with a three-way verdict
(`verdicts`: different / equivalent within +-margin / inconclusive), adjusted together (Holm by default).

A pair is oriented so that `first` has the higher (or equal) mean. It is compared paired (the t on per-seed
differences) when both variants' finished runs cover the same seeds and the runs at each seed share what it
fixes (run.json's `provenance.seed_fixes` and the warm-start key: `loading.provenance.pairing_key`); else
unpaired (Welch). A pair with fewer than 2 seeds on a side is not tested and not a member of the family.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from itertools import combinations

import numpy as np

from ..loading.provenance import pairing_key
from .aggregate import Score, VariantStats
from .multiplicity import Family
from .verdicts import (
    ALPHA,
    DEFAULT_MARGINS,
    DIFFERENT,
    EQUIVALENT,
    NOT_TESTED,
    THIS_WARM_START,
    PairData,
    PairVerdict,
    pair_verdicts,
)

FAMILY = "this report"


@dataclass(frozen=True)
class Comparisons:
    """The family, its verdicts (in family order: by score, then pair), and the pairs left untested."""

    family: Family
    verdicts: list[PairVerdict]
    scores: dict[str, Score]  # score name -> Score, for the units a verdict is shown in
    alpha: float = ALPHA
    margins: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MARGINS))
    untested: list[str] = field(default_factory=list)  # one sentence per pair with too few seeds

    def of(self, score: Score) -> list[PairVerdict]:
        return [v for v in self.verdicts if v.score == score.name]

    def describe(self) -> str:
        """ "15 pairs x 2 scores = 30 tests, Holm"; a report's family of one is one test, nothing adjusted."""
        if self.family.size == 1:
            return "1 test (one pair on one score): nothing to adjust"
        return self.family.describe().split(": ", 1)[1]


def is_paired(a: list, b: list) -> bool:
    """Whether two variants' runs `a`, `b` (one score's) pair up by seed: the same seeds, each once, and the
    runs at each seed share their pairing key (what the seed fixes and the warm-start)."""
    seeds_a, seeds_b = [r.seed for r in a], [r.seed for r in b]
    if None in seeds_a or None in seeds_b or len(set(seeds_a)) < len(a) or set(seeds_a) != set(seeds_b):
        return False
    by_seed = {r.seed: r for r in b}
    keys = [(pairing_key(r), pairing_key(by_seed[r.seed])) for r in a]
    return all(k is not None and k == other for k, other in keys)


def pair_data(score: Score, a: VariantStats, b: VariantStats, names: Mapping[str, str]) -> PairData:
    """`a` vs `b` on `score`, oriented higher mean first, in seed order (paired: seed i of both)."""
    ra, rb = a.scored[score.name], b.scored[score.name]
    xa, xb = a.scores[score.name], b.scores[score.name]
    paired = is_paired(ra, rb)
    if paired:  # seed order on both sides, so seed i meets seed i
        order_b = {r.seed: i for i, r in enumerate(rb)}
        xb = [xb[order_b[r.seed]] for r in ra]
    if np.mean(xb) > np.mean(xa):
        a, b, xa, xb = b, a, xb, xa
    first, second = names.get(a.label, a.label), names.get(b.label, b.label)
    return PairData(first, second, score.name, tuple(xa), tuple(xb), paired)


def compare_all(
    stats: list[VariantStats],
    scores: tuple[Score, ...],
    names: Mapping[str, str] | None = None,
    *,
    margins: Mapping[str, float] = DEFAULT_MARGINS,
    method: str = "holm",
    alpha: float = ALPHA,
    population: str = THIS_WARM_START,
) -> Comparisons:
    """Every pair of variants on every score with 2+ seeds a side, as one family adjusted by `method`.

    margins: score name -> equivalence margin in the score's units (fractions for accuracy); a score
    without one gets no equivalence test. population: whom the verdicts speak for (the warm-start).
    """
    names = names or {}
    members, untested = [], []
    for score in scores:
        for a, b in combinations(stats, 2):
            n, m = len(a.scores.get(score.name, [])), len(b.scores.get(score.name, []))
            if min(n, m) >= 2:
                members.append(pair_data(score, a, b, names))
            elif n and m:
                untested.append(
                    f"{names.get(a.label, a.label)} vs {names.get(b.label, b.label)} on {score.name}: {n} vs "
                    f"{m} seeds, too few for a test (2 a side); not in the family"
                )
    family, verdicts = pair_verdicts(members, FAMILY, margins=margins, alpha=alpha, method=method)
    verdicts = [replace(v, population=population) for v in verdicts]
    return Comparisons(family, verdicts, {s.name: s for s in scores}, alpha, dict(margins), untested)


def points(value: float, score: Score, signed: bool = True) -> str:
    """A difference in the score's shown units: "+2.3 pp" for a score in %, "-0.052" otherwise."""
    sign = "+" if signed else ""
    if score.unit == "%":
        return f"{value * score.scale:{sign}.1f} pp"
    return f"{value * score.scale:{sign}.3g}"


def interval(v: PairVerdict, score: Score) -> str:
    """ "+2.3 [+0.4, +4.2] pp" or "+0.05 [-0.01, +0.11]"."""
    unit = " pp" if score.unit == "%" else ""
    digits = "+.1f" if score.unit == "%" else "+.3g"
    s = score.scale
    return f"{v.effect * s:{digits}} [{v.low * s:{digits}}, {v.high * s:{digits}}]{unit}"


def prob_improvement(v: PairVerdict) -> str:
    """ "0.84 [0.52, 0.96]", with "(at its bound)" when the estimate is 0 or 1 (read it one-sided)."""
    text = f"{v.prob_improvement:.2f} [{v.prob_improvement_low:.2f}, {v.prob_improvement_high:.2f}]"
    return text + (" (at its bound)" if v.prob_improvement_at_bound else "")


def verdict_label(v: PairVerdict, score: Score) -> str:
    """ "different", "equivalent within ±2.0 pp" or "inconclusive"."""
    if v.verdict == EQUIVALENT:
        return f"equivalent within ±{points(v.margin, score, signed=False)}"
    return v.verdict


def sentence(v: PairVerdict, score: Score) -> str:
    """The pair's verdict as a sentence a reader can quote."""
    head = f"{v.first} vs {v.second} on {v.score}: {verdict_label(v, score)}"
    units = "warm-starts" if v.test.endswith("warm-start means") else "seeds"
    seeds = f"{v.n_first} vs {v.n_second} {units}, {v.test}"
    figures = (
        f"difference {interval(v, score)} ({seeds}), adjusted p = {v.p_adjusted:.3g}, exact test's adjusted "
        f"p = {v.p_exact_adjusted:.3g}; {v.population}"
    )
    if v.verdict == DIFFERENT:
        return f"{head}: {v.first} higher, {figures}; P(improvement) = {prob_improvement(v)}."
    if v.verdict == EQUIVALENT:
        return f"{head}: {figures}, equivalence (TOST) adjusted p = {v.p_equivalence_adjusted:.3g}."
    if v.verdict == NOT_TESTED:
        return f"{head}: every seed gave the same difference, {interval(v, score)}: no spread, so no test."
    if not v.decidable:
        return (
            f"{head}: {figures}; these {units} cannot decide: the {v.exact_test} test's smallest p, "
            f"{v.exact_floor:.3g}, is above alpha / {v.family_size}, and the t alone does not hold its level "
            "when a loss collapses on a few seeds (docs/statistics.md)."
        )
    text = (
        f"{head}: {figures}; these seeds detect a difference of {points(v.mde, score, signed=False)} with 80% "
        "power"
    )
    if v.margin is None:
        return text + "; no equivalence margin declared for this score (--margin)."
    need = "more than 1000" if v.seeds_needed > 1000 else f"about {v.seeds_needed}"
    return (
        f"{text}; to tell a ±{points(v.margin, score, signed=False)} difference (the margin) from none, "
        f"{need} seeds per variant."
    )
