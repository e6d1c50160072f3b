"""A finding's verdict on a sweep's runs: its effect with an interval and a p-value, and what that says.

The effect is a difference or a ratio of the arms' means, with a 95% stratified percentile bootstrap
interval (`statistics.estimates`) and an exact two-sided permutation p-value of the difference of means
(`statistics.pairwise`; for a ratio it tests the same null hypothesis, exchangeable seeds). A finding is
"reproduced" when p < ALPHA and the effect points the paper's way, "reproduced in the other direction" when
p < ALPHA and it points the other way, else "not reproduced".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..loading.runs import Run
from ..statistics.estimates import Estimate, percentile_interval
from ..statistics.intervals import as_scores
from ..statistics.pairwise import mean_difference, permutation_p_value, ratio_of_means
from ..statistics.verdicts import ALPHA
from .claims import Claim, baseline_threshold, steps_to, steps_to_baseline_level


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    treatment: list[float]  # the per-run numbers, finished runs in seed order
    control: list[float]
    effect: Estimate
    p_value: float | None
    verdict: str
    threshold: float | None = None  # the accuracy a steps-to-threshold claim was measured at


def arm_values(claim: Claim, runs: list[Run], arm: str) -> list[float]:
    """The per-run numbers of the finished runs of `arm` that logged the claim's metric, in seed order."""
    chosen = sorted(
        (r for r in runs if r.finished and arm in r.overrides), key=lambda r: (r.seed or 0, r.name)
    )
    values = [claim.per_run(r.metrics[claim.key], r) for r in chosen if r.metrics.get(claim.key)]
    return [v for v in values if v is not None and np.isfinite(v)]


def decide(claim: Claim, runs: list[Run]) -> Verdict:
    """The claim's effect, interval, p-value and verdict on `runs` (raises ValueError if an arm is empty)."""
    threshold = None
    if claim.per_run is steps_to_baseline_level:
        threshold, start = baseline_threshold(runs, claim.treatment, claim.key)
        if not threshold > start:  # the baseline ended no better than it started: nothing to reach
            nan = Estimate(float("nan"), None, None, 0)
            reason = (
                f"not testable: the baseline's final {claim.key} is not above the warm-start's {start:.1%}"
            )
            return Verdict(claim, [], [], nan, None, reason, threshold)
        claim = dataclasses.replace(claim, per_run=lambda series, run: steps_to(series, threshold))
    x, y = arm_values(claim, runs, claim.treatment), arm_values(claim, runs, claim.control)
    if not x or not y:
        empty = claim.treatment if not x else claim.control
        raise ValueError(f"finding {claim.name}: no finished run of {empty} logged {claim.key}")
    statistic = ratio_of_means if claim.effect == "ratio" else mean_difference
    xs, ys = as_scores(x), as_scores(y)
    value = float(statistic(xs, ys))
    low = high = None
    if min(len(x), len(y)) >= 2 and not (np.all(xs == xs[0]) and np.all(ys == ys[0])):
        low, high = (float(v) for v in percentile_interval((xs, ys), statistic))
    p = permutation_p_value(xs, ys) if len(x) + len(y) > 2 else None
    null = 1.0 if claim.effect == "ratio" else 0.0
    significant = p is not None and p < ALPHA
    if significant and value < null:
        verdict = "reproduced in the other direction"
    elif significant:
        verdict = "reproduced"
    else:
        verdict = "no difference detected" if claim.expected == ">=" else "not reproduced"
    return Verdict(claim, x, y, Estimate(value, low, high, min(len(x), len(y))), p, verdict, threshold)
