"""A finding's verdict on a sweep's runs, in the report's vocabulary (`statistics.verdicts`).

A finding is one pre-declared primary test (a family of one, not adjusted, and the page says so): Welch's t
of the arms' difference of means (the paired t on per-seed differences when the arms' runs pair up by seed,
as in the report), with the paper's direction. "different": significant in the paper's direction;
"contradicted": significant in the other; "equivalent": inside the claim's declared margin (TOST), when it
declares one; else "inconclusive", with the smallest effect the seeds could detect. For a ratio claim the
ratio of the arms' means is shown beside the difference; the test is the same (equal means). A claim's
declared preconditions (`claims.Needs`) are measured on the runs first; when one is not met the verdict is
"precondition absent" and the claim's statistic is not tested (its effect is shown as a description).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from twinkle_exp.summary.step_grid import grid_span

from ..loading.runs import Run
from ..statistics.aggregate import grid_score
from ..statistics.comparisons import is_paired
from ..statistics.threshold import common_horizon, restricted_steps
from ..statistics.verdicts import (
    CONTRADICTED,
    DIFFERENT,
    PairData,
    PairVerdict,
    Precondition,
    finding_verdict,
)
from .claims import REDUCTIONS, Claim, Needs, auc_on_shared_grid, baseline_threshold, steps_to_baseline_level

# The paper's direction -> finding_verdict's `expected` (+1: treatment above control); "=" is tested as +1
# and a "different" either way then contradicts the claim.
DIRECTIONS = {">": 1, ">=": 1, "=": 1, "<": -1, "<=": -1}


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    treatment: list[float]  # the per-run numbers, finished runs in seed order
    control: list[float]
    pair: PairVerdict | None  # None when the claim could not be tested (the verdict says why)
    verdict: str
    threshold: float | None = None  # the accuracy a steps-to-threshold claim was measured at
    preconditions: tuple[Precondition, ...] = ()  # each declared one, as measured on these runs

    @property
    def ratio(self) -> float | None:
        """Treatment mean / control mean (ratio claims' point figure); None without values."""
        if not self.treatment or not self.control or np.mean(self.control) == 0:
            return None
        return float(np.mean(self.treatment) / np.mean(self.control))


def arm_runs(claim: Claim, runs: list[Run], arm: str) -> list[Run]:
    """The finished runs of `arm` that logged the claim's metric, in seed order."""
    chosen = [r for r in runs if r.finished and arm in r.overrides and r.metrics.get(claim.key)]
    return sorted(chosen, key=lambda r: (r.seed or 0, r.name))


def arm_values(claim: Claim, chosen: list[Run]) -> tuple[list[Run], list[float]]:
    """The runs with a finite per-run number, and those numbers."""
    pairs = [(r, claim.per_run(r.metrics[claim.key], r)) for r in chosen]
    kept = [(r, v) for r, v in pairs if v is not None and np.isfinite(v)]
    return [r for r, _ in kept], [float(v) for _, v in kept]


def _shared(claim: Claim, runs: list[Run]) -> Claim | str:
    """The claim with a per-run number that depends on both arms' runs fixed for this sweep (steps to the
    baseline's level within the common horizon; the AUC over the common span), or why it is not testable."""
    both = [r for arm in (claim.treatment, claim.control) for r in arm_runs(claim, runs, arm)]
    if claim.per_run is steps_to_baseline_level:
        threshold, start = baseline_threshold(runs, claim.treatment, claim.key)
        if not threshold > start:  # the baseline ended no better than it started: nothing to reach
            return f"not testable: the baseline's final {claim.key} is not above the warm-start's {start:.1%}"
        horizon = common_horizon([r.metrics[claim.key] for r in both])
        return dataclasses.replace(
            claim, per_run=lambda series, run: restricted_steps([series], threshold, horizon)[0]
        )
    if claim.per_run is auc_on_shared_grid and both:
        span = grid_span([(r.metrics[claim.key][0][0], r.metrics[claim.key][-1][0]) for r in both])
        return dataclasses.replace(claim, per_run=lambda series, run: grid_score(series, span))
    return claim


def measure(needs: Needs, claim: Claim, runs: list[Run]) -> Precondition:
    """`needs` measured on the finished runs of its arm(s): the mean of each run's reduced series (NaN,
    so not met, when none logged it)."""
    arms = (claim.treatment, claim.control) if needs.arm == "both" else (getattr(claim, needs.arm),)
    chosen = [
        r for r in runs if r.finished and any(a in r.overrides for a in arms) and r.metrics.get(needs.key)
    ]
    per_run = [REDUCTIONS[needs.reduce](r.metrics[needs.key]) for r in chosen]
    finite = [v for v in per_run if np.isfinite(v)]
    measured = float(np.mean(finite)) if finite else float("nan")
    return Precondition(needs.name, measured, needs.threshold, needs.at_least)


def decide(claim: Claim, runs: list[Run]) -> Verdict:
    """The claim's test and verdict on `runs` (raises ValueError if an arm is empty)."""
    threshold = None
    if claim.per_run is steps_to_baseline_level:
        threshold, _ = baseline_threshold(runs, claim.treatment, claim.key)
    fixed = _shared(claim, runs)
    if isinstance(fixed, str):
        return Verdict(claim, [], [], None, fixed, threshold)
    runs_x, x = arm_values(fixed, arm_runs(claim, runs, claim.treatment))
    runs_y, y = arm_values(fixed, arm_runs(claim, runs, claim.control))
    if not x or not y:
        empty = claim.treatment if not x else claim.control
        raise ValueError(f"finding {claim.name}: no finished run of {empty} logged {claim.key}")
    if min(len(x), len(y)) < 2:
        why = f"not testable: {len(x)} vs {len(y)} seeds, a test needs 2 a side"
        return Verdict(claim, x, y, None, why, threshold)
    paired = is_paired(runs_x, runs_y)
    data = PairData(claim.treatment, claim.control, claim.key, tuple(x), tuple(y), paired)
    checks = tuple(measure(n, claim, runs) for n in claim.preconditions)
    # The first one not met decides ("precondition absent", no p); all met, the first is recorded.
    shown = next((c for c in checks if not c.met), checks[0] if checks else None)
    pair = finding_verdict(
        claim.name, data, expected=DIRECTIONS[claim.expected], margin=claim.margin, precondition=shown
    )
    if claim.expected == "=" and pair.verdict == DIFFERENT:
        pair = dataclasses.replace(pair, verdict=CONTRADICTED)
    return Verdict(claim, x, y, pair, pair.verdict, threshold, checks)
