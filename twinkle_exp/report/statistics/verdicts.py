"""The verdict on each pair of a family: "different", "equivalent" (within +-margin) or "inconclusive"; for a
finding also "contradicted" and "precondition absent".

- different: the family-adjusted p of the verdict's test is below alpha, and its (1 - alpha) interval
  excludes 0 (the same t, so the second follows from the first; both are recorded).
- equivalent: the family-adjusted TOST p at the score's margin is below alpha (a false "equivalent" is a
  false claim too, so the TOST p-values are adjusted over the family with the same method). A difference
  that is significant and also inside the margin is "different"; its row shows the TOST p beside it.
- inconclusive: neither; the row gives the minimum detectable effect at the seeds used (80% power, alpha /
  family size) and the seeds per variant at which the margin itself would be detected.

The test is Welch's t (unpaired) or the paired t on per-seed differences. Not the exact permutation tests:
at 5 seeds their floors (0.0079 unpaired 5 vs 5, 0.0625 paired) are above Holm's 0.05 / 30 = 0.0017, so no
pair of a 5-seed sweep could ever be called. The t test keeps its level at 3-10 seeds, at 0.05 and at
0.05 / 30: normal data 3.5% / 4.5% / 4.9% (Welch at 3 / 5 / 10 seeds) and 5.0% (paired); lognormal and
Beta(18, 2) scores 2.0-4.8% (conservative); at 0.05 / 30 at most 0.0018 (docs/statistics.md, measured by
`python tests/stats_simulation.py`). Holm over 15 pairs x 2 scores of identical variants: at least one
"different" in 2.5% of sweeps at 5 seeds, 4.1% at 10. As a check that does not lean on normality, the
design's exact permutation p (unpaired splits, or sign flips) is computed beside it (`p_exact`), unadjusted.

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
from .paired import exact_p_value, paired_scores, paired_summary
from .power import POWER, minimum_detectable_effect, seeds_needed

DIFFERENT, EQUIVALENT, INCONCLUSIVE = "different", "equivalent", "inconclusive"
CONTRADICTED, PRECONDITION_ABSENT = "contradicted", "precondition absent"
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
    prob_improvement_at_bound (estimate at 0 or 1: read the interval as one-sided); exact_test and p_exact
    (the design's permutation test, unadjusted, a check; None when not computed); verdict; claim, expected
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
    verdict: str
    claim: str | None = None
    expected: int | None = None
    precondition: str | None = None
    precondition_measured: float | None = None
    precondition_required: float | None = None

    def to_row(self) -> dict:
        return asdict(self)


def _raw(d: PairData, margin: float | None, test_alpha: float, alpha: float, exact: bool) -> dict:
    """The pair's figures before the family is adjusted."""
    x, y = paired_scores(d.x, d.y) if d.paired else (as_scores(d.x), as_scores(d.y))
    if min(len(x), len(y)) < 2:
        raise ValueError(f"{d.first} vs {d.second} on {d.score}: {len(x)} vs {len(y)} seeds, need 2 a side")
    s = paired_summary(x, y) if d.paired else welch_summary(x, y)
    low, high = t_bounds(s, 1 - alpha)
    spread = (np.std(x - y, ddof=1), None) if d.paired else (np.std(x, ddof=1), np.std(y, ddof=1))
    exact_test, p_exact = (None, None)
    if exact:
        p_exact, exact_test = exact_p_value(x, y, d.paired)
    return dict(
        score=d.score, first=d.first, second=d.second, n_first=len(x), n_second=len(y), paired=d.paired,
        test=s.test, effect=float(s.estimate), low=float(low), high=float(high), confidence=1 - alpha,
        p_raw=float(t_p_value(s)), alpha=alpha, margin=margin,
        p_equivalence=None if margin is None else float(tost_p_values(s, margin)[0]),
        mde=minimum_detectable_effect(s, test_alpha, POWER),
        seeds_needed=None if margin is None else seeds_needed(margin, *spread, alpha=test_alpha),
        prob_improvement=float(prob_improvement(x, y)), exact_test=exact_test, p_exact=p_exact,
    )  # fmt: skip


def decide(
    p_adjusted: float, low: float, high: float, p_equivalence_adjusted: float | None, alpha: float
) -> str:
    """different, equivalent or inconclusive from the adjusted p's and the interval (rules in the module doc)."""
    if p_adjusted < alpha and (low > 0 or high < 0):
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
    exact: bool = True,
) -> tuple[Family, list[PairVerdict]]:
    """The family of `pairs` (every one tested; each needs 2 seeds a side) and a verdict per pair, in order.

    margins: score name -> equivalence margin; a score without one gets no equivalence test. exact: compute
    the exact permutation p beside the t test (it does not change the verdict).
    """
    family = Family(family_name, tuple((d.first, d.second, d.score) for d in pairs), method)
    test_alpha = family.per_test_alpha(alpha)
    raws = [_raw(d, margins.get(d.score), test_alpha, alpha, exact) for d in pairs]
    if not raws:
        return family, []
    theta = [r["prob_improvement"] for r in raws]
    sizes = np.array([(r["n_first"], r["n_second"]) for r in raws]).T
    theta_low, theta_high = np.atleast_1d(
        *newcombe_bounds(theta, *sizes, 1 - alpha)
    )  # all pairs in one search
    p_adjusted = family.adjust([r["p_raw"] for r in raws])
    with_margin = [i for i, r in enumerate(raws) if r["p_equivalence"] is not None]
    tost_family = Family(family_name, tuple(family.members[i] for i in with_margin), method)
    tost_adjusted = tost_family.adjust([raws[i]["p_equivalence"] for i in with_margin])
    p_equivalence_adjusted = dict(zip(with_margin, map(float, tost_adjusted), strict=True))
    out = []
    for i, r in enumerate(raws):
        eq = p_equivalence_adjusted.get(i)
        verdict = decide(float(p_adjusted[i]), r["low"], r["high"], eq, alpha)
        extra = dict(p_adjusted=float(p_adjusted[i]), p_equivalence_adjusted=eq, verdict=verdict)
        extra.update(
            prob_improvement_low=float(theta_low[i]),
            prob_improvement_high=float(theta_high[i]),
            prob_improvement_at_bound=r["prob_improvement"] in (0.0, 1.0),
        )
        out.append(PairVerdict(family=family_name, family_size=family.size, adjustment=method, **r, **extra))
    return family, out


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
    exact: bool = True,
) -> PairVerdict:
    """A finding's verdict: its single pre-declared primary test (a family of one, not adjusted).

    expected: +1 when the claim says first > second, -1 when first < second. "different" means significant
    in the claim's direction, "contradicted" significant in the other. With a precondition that was measured
    and not met the verdict is "precondition absent" and no p-value is given: the effect and its interval
    stay in the row as a description, not as a test of the claim.
    """
    if expected not in (1, -1):
        raise ValueError(f"expected must be +1 (first > second) or -1 (first < second), got {expected}")
    margins = {} if margin is None else {data.score: margin}
    _, (v,) = pair_verdicts([data], claim, margins=margins, alpha=alpha, method="none", exact=exact)
    verdict = CONTRADICTED if v.verdict == DIFFERENT and np.sign(v.effect) != expected else v.verdict
    fields = dict(claim=claim, expected=expected, verdict=verdict)
    if precondition is not None:
        fields.update(
            precondition=precondition.name,
            precondition_measured=precondition.measured,
            precondition_required=precondition.required,
        )
        if not precondition.met:
            untested = ("p_raw", "p_adjusted", "p_equivalence", "p_equivalence_adjusted", "p_exact")
            fields.update(dict.fromkeys(untested), verdict=PRECONDITION_ABSENT)
    return replace(v, **fields)
