"""The diagnostics over a whole report: each run's diagnoses gathered per variant, and variants with identical
curves.

Two variants whose runs of the same seed logged the same outcome curves (reward, accuracy, completion length,
entropy) made the same updates: whatever distinguishes them (a normaliser, a temperature) had no effect in this
setting, usually because of one of the traps in `per_run` (on-policy updates, clipping on every step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from twinkle_exp import metric_names as M
from twinkle_exp.summary.diagnostics.diagnosis import Diagnosis
from twinkle_exp.summary.diagnostics.per_run import DIAGNOSTICS, diagnose_run

from ..loading.runs import Run

# What the policy did, not how the loss scored it: train/loss and train/grad_norm differ by the normaliser
# even when the updates are the same.
OUTCOME_KEYS = (M.REWARD_MEAN, M.VAL_ACCURACY, M.COMPLETION_MEAN_LENGTH, M.ENTROPY)
MIN_ROLLOUTS = (
    5  # the first rollout is the same for every variant of a seed; identical must mean more than it
)
# Same updates give the same samples, so rewards, accuracy and lengths match exactly; entropy, a float
# average, drifts by float rounding (measured: 1.3e-5 relative after 100 on-policy steps of BNPO vs CISPO).
RTOL, ATOL = 1e-4, 1e-8


@dataclass
class DiagnosticResult:
    """One diagnostic over the report: the variants it fired on, with one run's evidence each."""

    diagnostic: str
    title: str
    advice: str = ""
    variants: dict[str, list[Diagnosis]] = field(default_factory=dict)  # label -> one per affected run
    seeds: dict[str, int] = field(default_factory=dict)  # label -> runs of the variant that were checked


def diagnose_sweep(variants: dict[str, list[Run]]) -> list[DiagnosticResult]:
    """DIAGNOSTICS over every run that logged metrics, in that order, one DiagnosticResult per diagnostic
    (fired or not)."""
    results = {name: DiagnosticResult(name, title) for name, (title, _) in DIAGNOSTICS.items()}
    for label, runs in variants.items():
        checked = [run for run in runs if run.metrics or run.nonfinite]
        for run in checked:
            for diagnosis in diagnose_run(run.metrics, run.nonfinite, run.config, run.samples):
                result = results[diagnosis.diagnostic]
                result.advice = (
                    result.advice or diagnosis.advice
                )  # the advice of the run the evidence is from
                result.variants.setdefault(label, []).append(diagnosis)
                result.seeds[label] = len(checked)
    return list(results.values())


def identical_variants(variants: dict[str, list[Run]]) -> list[tuple[list[str], list[int]]]:
    """Groups of variants whose runs of every shared seed logged the same outcome curves.

    Returns ([labels], [seeds compared]) per group, over finished runs; a group is a connected set of
    identical pairs. Curves are the same when, for each outcome key both runs logged, they logged it at the
    same steps with values equal to RTOL; pairs that share no seed with at least MIN_ROLLOUTS logged rewards
    are never called identical.
    """
    by_seed = {  # finished runs only: a run cut short would match any variant up to where it stopped
        label: {run.seed: run for run in runs if run.seed is not None and run.finished and run.metrics}
        for label, runs in variants.items()
    }
    group_of = {label: {label} for label in variants}
    seeds_of: dict[str, set[int]] = {}
    for a, b in combinations(variants, 2):
        shared = sorted(set(by_seed[a]) & set(by_seed[b]))
        shared = [s for s in shared if _long_enough(by_seed[a][s]) and _long_enough(by_seed[b][s])]
        if shared and all(_same_curves(by_seed[a][s], by_seed[b][s]) for s in shared):
            merged = group_of[a] | group_of[b]
            seeds = (
                seeds_of.get(min(group_of[a]), set()) | seeds_of.get(min(group_of[b]), set()) | set(shared)
            )
            for label in merged:
                group_of[label] = merged
            seeds_of[min(merged)] = seeds
    groups = {frozenset(g) for g in group_of.values() if len(g) > 1}
    return sorted((sorted(g), sorted(seeds_of[min(g)])) for g in groups)


def _long_enough(run: Run) -> bool:
    """Whether the run logged rewards for at least MIN_ROLLOUTS rollouts."""
    return len(run.metrics.get(M.REWARD_MEAN, [])) >= MIN_ROLLOUTS


def _same_curves(x: Run, y: Run) -> bool:
    """Whether every OUTCOME_KEYS metric both runs logged has the same steps and values (to RTOL)."""
    compared = 0
    for key in OUTCOME_KEYS:
        if key not in x.metrics or key not in y.metrics:
            continue
        (sx, vx), (sy, vy) = zip(*x.metrics[key], strict=True), zip(*y.metrics[key], strict=True)
        if sx != sy or not np.allclose(vx, vy, rtol=RTOL, atol=ATOL):
            return False
        compared += 1
    return compared > 0
