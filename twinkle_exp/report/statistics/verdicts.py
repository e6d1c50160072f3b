"""The verdict on each pair of a family: "different", "equivalent" (within +-margin), "inconclusive" or "not
tested"; for a finding also "contradicted", "non-inferior" and "precondition absent".

- different: the family-adjusted p of the t test is below alpha, its (1 - alpha) interval excludes 0, AND the
  family-adjusted p of the design's exact test (sign flips of per-seed differences, or permutations of the
  pooled seeds) is below alpha too. The t alone does not hold its level when the scores are not normal in a
  way a few seeds cannot show: a loss that collapses by 20 points on 10% of seeds and is 2.2 points better
  otherwise has the same mean as its rival, yet the paired t at alpha / 30 rejects that null 4-15x as often
  as it should, because most 5- or 10-seed samples contain no collapse at all (docs/statistics.md, measured
  by `python tests/stats_simulation.py`). The exact test's floor (2 / 2^n paired) is then what it is: at 5
  or 10 paired seeds in a family of 30 it is above the level, and the row says the seeds cannot decide
  (`decidable` False) rather than call a difference the design cannot support.
- not tested: the interval has width zero (every seed gave the same difference: a saturated score, a metric
  constant over the seeds). A zero-width interval says nothing about the noise; it is never "different".
- equivalent: the family-adjusted TOST p at the score's margin is below alpha (a false "equivalent" is a
  false claim too, so the TOST p-values are adjusted over the family with the same method). A difference
  that is significant and also inside the margin is "different"; its row shows the TOST p beside it.
- inconclusive: none of these; the row gives the minimum detectable effect at the seeds used (80% power,
  alpha / family size) and the seeds per variant at which the margin itself would be detected.

The t test is Welch's (unpaired) or the paired t on per-seed differences: normal data 3.5% / 4.5% / 4.9%
(Welch at 3 / 5 / 10 seeds) and 5.0% (paired); lognormal and Beta(18, 2) scores 2.0-4.8% (conservative).

A finding's ">=" / "<=" claim ("at least as well") is tested as non-inferiority against its margin (0 when it
declares none): "non-inferior" when the (1 - alpha) interval of the difference, oriented the claim's way,
lies above -margin, "contradicted" only when it lies wholly below -margin, else "inconclusive".

Scores are fractions in [0, 1], as `report.aggregate.Score` holds them (shown x100 with unit "%"), so the
default margins, 2 AUC points and 2 accuracy points, are 0.02.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from .equivalence import tost_p_values
from .intervals import as_scores, newcombe_bounds, prob_improvement, t_bounds, t_p_value, welch_summary
from .multiplicity import Family
from .paired import exact_floor, exact_p_value, paired_scores, paired_summary
from .power import POWER, minimum_detectable_effect, seeds_needed

DIFFERENT, EQUIVALENT, INCONCLUSIVE = "different", "equivalent", "inconclusive"
NOT_TESTED = "not tested"  # a zero-width interval: no spread, no test
CONTRADICTED, PRECONDITION_ABSENT = "contradicted", "precondition absent"
NON_INFERIOR = "non-inferior"  # a ">=" / "<=" claim supported: not worse than its margin
CONTRADICTED_IN_SETTING = "contradicted in this setting"  # the paper's condition was known absent here
ZERO_SPREAD = 1e-12  # a standard error this small (score units) is rounding of no spread at all
THIS_WARM_START = "this warm-start"  # the population a verdict on one warm-start's runs speaks for
ALPHA = 0.05
DEFAULT_MARGINS = {"AUC": 0.02, "final accuracy": 0.02}  # score name -> margin, in the score's units


@dataclass(frozen=True)
class PairData:
    """One member of the family: `first` vs `second` on `score`, their per-seed scores `[n]` and `[m]`
    (in seed order; paired means seed i of both shares its warm-start, prompt and sampler streams)."""

    first: str
    second: str
    score: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    paired: bool = False


@dataclass(frozen=True)
class PairVerdict:
    """Every number behind one pair's verdict; `to_row()` flattens it for verdicts.csv / .json.

    Columns: family (name), family_size (tests adjusted together), adjustment (holm, bh or none); score,
    first, second (variant labels), n_first, n_second (seeds); paired (per-seed differences used), test
    ("Welch t" or "paired t"); effect = mean(first) - mean(second) in the score's units (fractions for
    accuracy and AUC), low and high its two-sided interval at `confidence` (= 1 - alpha); p_raw (the test's
    two-sided p), p_adjusted (over the family), alpha; margin (None: no equivalence test), p_equivalence
    (TOST) and p_equivalence_adjusted; mde (the smallest difference the test detects with 80% power at alpha /
    family_size, score units), seeds_needed (per variant, for the margin to be detected likewise; None without
    a margin); prob_improvement (P(a seed of first beats one of second)) with prob_improvement_low and
    prob_improvement_high (its score interval at `confidence`) and
    prob_improvement_at_bound (estimate at 0 or 1: read the interval as one-sided); exact_test, p_exact and
    p_exact_adjusted (the design's permutation test, raw and adjusted over the family: "different" needs it
    below alpha too), exact_floor (its smallest possible p) and decidable (whether that floor, adjusted, is
    below alpha: False means these seeds cannot decide); verdict; population (whom it speaks for: "this
    warm-start", or "across N warm-starts (random effect)"), warm_start (set on per-warm-start breakdown
    rows only), p_noninferiority (findings' ">=" / "<=" claims); claim, expected
    (+1: the claim says first > second, -1: first < second), precondition, precondition_measured and
    precondition_required (findings only, else None).
    """

    family: str
    family_size: int
    adjustment: str
    score: str
    first: str
    second: str
    n_first: int
    n_second: int
    paired: bool
    test: str
    effect: float
    low: float
    high: float
    confidence: float
    p_raw: float | None  # None only for "precondition absent"
    p_adjusted: float | None
    alpha: float
    margin: float | None
    p_equivalence: float | None
    p_equivalence_adjusted: float | None
    mde: float
    seeds_needed: int | None
    prob_improvement: float
    prob_improvement_low: float
    prob_improvement_high: float
    prob_improvement_at_bound: bool
    exact_test: str | None
    p_exact: float | None
    p_exact_adjusted: float | None
    exact_floor: float | None
    decidable: bool  # the exact test's smallest p, adjusted over the family, can fall below alpha
    verdict: str
    population: str = (
        THIS_WARM_START  # whom the verdict speaks for: "this warm-start" or "across N warm-starts"
    )
    warm_start: str | None = None  # a per-warm-start breakdown row: its warmup.seed; None for the verdict row
    p_noninferiority: float | None = None  # ">=" / "<=" claims: one-sided p of "worse by the margin or more"
    claim: str | None = None
    expected: int | None = None
    precondition: str | None = None
    precondition_measured: float | None = None
    precondition_required: float | None = None

    def to_row(self) -> dict:
        return asdict(self)


def _raw(d: PairData, margin: float | None, test_alpha: float, alpha: float) -> dict:
    """The pair's figures before the family is adjusted."""
    x, y = paired_scores(d.x, d.y) if d.paired else (as_scores(d.x), as_scores(d.y))
    if min(len(x), len(y)) < 2:
        raise ValueError(f"{d.first} vs {d.second} on {d.score}: {len(x)} vs {len(y)} seeds, need 2 a side")
    s = paired_summary(x, y) if d.paired else welch_summary(x, y)
    low, high = t_bounds(s, 1 - alpha)
    spread = (np.std(x - y, ddof=1), None) if d.paired else (np.std(x, ddof=1), np.std(y, ddof=1))
    p_exact, exact_test = exact_p_value(x, y, d.paired)
    return dict(
        score=d.score, first=d.first, second=d.second, n_first=len(x), n_second=len(y), paired=d.paired,
        test=s.test, effect=float(s.estimate), low=float(low), high=float(high), confidence=1 - alpha,
        p_raw=float(t_p_value(s)), alpha=alpha, margin=margin,
        p_equivalence=None if margin is None else float(tost_p_values(s, margin)[0]),
        mde=minimum_detectable_effect(s, test_alpha, POWER),
        seeds_needed=None if margin is None else seeds_needed(margin, *spread, alpha=test_alpha),
        prob_improvement=float(prob_improvement(x, y)), exact_test=exact_test, p_exact=p_exact,
        exact_floor=exact_floor(len(x), len(y), d.paired), zero_width=bool(float(s.se) <= ZERO_SPREAD),
    )  # fmt: skip


def decide(
    p_adjusted: float,
    low: float,
    high: float,
    p_equivalence_adjusted: float | None,
    alpha: float,
    p_exact_adjusted: float | None = None,
) -> str:
    """different, equivalent, inconclusive or not tested from the adjusted p's and the interval (rules in the
    module doc). p_exact_adjusted None: no exact test (a single caller's choice; the report always has one)."""
    if high - low <= ZERO_SPREAD:
        return NOT_TESTED
    exact_agrees = p_exact_adjusted is None or p_exact_adjusted < alpha
    if p_adjusted < alpha and (low > 0 or high < 0) and exact_agrees:
        return DIFFERENT
    if p_equivalence_adjusted is not None and p_equivalence_adjusted < alpha:
        return EQUIVALENT
    return INCONCLUSIVE


def pair_verdicts(
    pairs: Sequence[PairData],
    family_name: str,
    *,
    margins: Mapping[str, float] = DEFAULT_MARGINS,
    alpha: float = ALPHA,
    method: str = "holm",
) -> tuple[Family, list[PairVerdict]]:
    """The family of `pairs` (every one tested; each needs 2 seeds a side) and a verdict per pair, in order.

    margins: score name -> equivalence margin; a score without one gets no equivalence test.
    """
    family = Family(family_name, tuple((d.first, d.second, d.score) for d in pairs), method)
    test_alpha = family.per_test_alpha(alpha)
    raws = [_raw(d, margins.get(d.score), test_alpha, alpha) for d in pairs]
    if not raws:
        return family, []
    theta = [r["prob_improvement"] for r in raws]
    sizes = np.array([(r["n_first"], r["n_second"]) for r in raws]).T
    theta_low, theta_high = np.atleast_1d(
        *newcombe_bounds(theta, *sizes, 1 - alpha)
    )  # all pairs in one search
    p_adjusted = family.adjust([r["p_raw"] for r in raws])
    p_exact_adjusted = family.adjust([r["p_exact"] for r in raws])
    with_margin = [i for i, r in enumerate(raws) if r["p_equivalence"] is not None]
    tost_family = Family(family_name, tuple(family.members[i] for i in with_margin), method)
    tost_adjusted = tost_family.adjust([raws[i]["p_equivalence"] for i in with_margin])
    p_equivalence_adjusted = dict(zip(with_margin, map(float, tost_adjusted), strict=True))
    out = []
    for i, r in enumerate(raws):
        eq = p_equivalence_adjusted.get(i)
        zero_width = r.pop("zero_width")
        exact_adjusted = float(p_exact_adjusted[i])
        verdict = decide(float(p_adjusted[i]), r["low"], r["high"], eq, alpha, exact_adjusted)
        if zero_width:  # rounding leaves a spread of 1e-17 where every seed gave the same figure
            verdict, r["p_raw"] = NOT_TESTED, 1.0
        extra = dict(
            p_adjusted=float(p_adjusted[i]),
            p_equivalence_adjusted=eq,
            verdict=verdict,
            p_exact_adjusted=exact_adjusted,
            decidable=bool(r["exact_floor"] < test_alpha),
        )
        extra.update(
            prob_improvement_low=float(theta_low[i]),
            prob_improvement_high=float(theta_high[i]),
            prob_improvement_at_bound=r["prob_improvement"] in (0.0, 1.0),
        )
        out.append(PairVerdict(family=family_name, family_size=family.size, adjustment=method, **r, **extra))
    return family, out


def non_inferiority(data: PairData, expected: int, margin: float, alpha: float) -> dict:
    """The verdict and one-sided p of a ">=" / "<=" claim: is first - second, oriented by `expected`, above
    -margin? The test is the t of the pair (paired or Welch) at alpha / 2 on each side, so its decisions are
    those of the two-sided (1 - alpha) interval: above -margin "non-inferior", below it "contradicted"."""
    x, y = paired_scores(data.x, data.y) if data.paired else (as_scores(data.x), as_scores(data.y))
    s = paired_summary(x, y) if data.paired else welch_summary(x, y)
    oriented = replace(s, estimate=expected * s.estimate)
    p_not_worse = float(t_p_value(oriented, null=-margin, alternative="greater"))  # H0: worse by >= margin
    p_worse = float(t_p_value(oriented, null=-margin, alternative="less"))  # H0: not worse by the margin
    verdict = (
        NON_INFERIOR if p_not_worse < alpha / 2 else CONTRADICTED if p_worse < alpha / 2 else INCONCLUSIVE
    )
    return dict(verdict=verdict, p_noninferiority=p_not_worse)


@dataclass(frozen=True)
class Precondition:
    """A pre-registered condition a claim needs, measured on the runs (e.g. the share of tokens at the clip
    bound, at least 0.1): `met` when `measured` >= `required` (at_least) or <= it (not at_least)."""

    name: str
    measured: float
    required: float
    at_least: bool = True

    @property
    def met(self) -> bool:
        return self.measured >= self.required if self.at_least else self.measured <= self.required


def finding_verdict(
    claim: str,
    data: PairData,
    expected: int,
    *,
    margin: float | None = None,
    precondition: Precondition | None = None,
    alpha: float = ALPHA,
    at_least: bool = False,
) -> PairVerdict:
    """A finding's verdict: its single pre-declared primary test (a family of one, not adjusted).

    expected: +1 when the claim says first > second, -1 when first < second. "different" means significant
    in the claim's direction, "contradicted" significant in the other. at_least: the claim is ">=" / "<="
    ("at least as well"): a non-inferiority test against `margin` (0 without one), "non-inferior" when the
    interval oriented the claim's way lies above -margin, "contradicted" only when it lies below -margin
    (module doc). With a precondition that was measured and not met the verdict is "precondition absent" and
    no p-value is given: the effect and its interval stay in the row as a description, not as a test of the
    claim.
    """
    if expected not in (1, -1):
        raise ValueError(f"expected must be +1 (first > second) or -1 (first < second), got {expected}")
    margins = {} if margin is None else {data.score: margin}
    _, (v,) = pair_verdicts([data], claim, margins=margins, alpha=alpha, method="none")
    verdict = CONTRADICTED if v.verdict == DIFFERENT and np.sign(v.effect) != expected else v.verdict
    fields = dict(claim=claim, expected=expected, verdict=verdict)
    if at_least and v.verdict != NOT_TESTED:
        fields.update(non_inferiority(data, expected, margin or 0.0, alpha))
    if precondition is not None:
        fields.update(
            precondition=precondition.name,
            precondition_measured=precondition.measured,
            precondition_required=precondition.required,
        )
        if not precondition.met:
            untested = (
                "p_raw", "p_adjusted", "p_equivalence", "p_equivalence_adjusted", "p_exact", "p_exact_adjusted",
                "p_noninferiority",
            )  # fmt: skip
            fields.update(dict.fromkeys(untested), verdict=PRECONDITION_ABSENT)
    return replace(v, **fields)
