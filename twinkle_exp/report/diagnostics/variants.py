"""Diagnostics that compare variants with each other: a shared ceiling, and variants that are one objective.

- `ceiling`: every variant ends within CEILING_SPREAD of the others at a level the per-answer-length
  breakdown shows is the task's (a length no variant learns, or every variant saturated), so final accuracy
  cannot tell them apart whatever the loss (issue 20: 77.3% on reverse, length-5 answers at 0% for all).
- `scalar_normaliser`: two variants whose losses differ only by a per-step scalar under the advantages they
  were given (BNPO's 1 / tokens against Dr.GRPO's 1 / (sequences x max length), with the same advantages):
  their gradients point the same way every step, and Adam plus the gradient clip cancel most of the size.
Both return a `DiagnosticResult` (empty `variants` when silent), rendered like the per-run diagnostics.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from twinkle_exp import metric_names as M
from twinkle_exp.summary.diagnostics.diagnosis import Diagnosis
from twinkle_exp.summary.series import last_value

from ..loading.runs import Run
from .sweep import DiagnosticResult

CEILING_SPREAD = 0.03  # final accuracies within 3 points of each other
STUCK_LEVEL = 0.10  # an answer length at or below 10% in every variant: a part of the task nobody learns
SATURATED_LEVEL = 0.95  # every variant at or above 95%: nothing left to learn
# Clip-objective losses whose aggregation divides the batch's token sum by one number per step.
SCALAR_NORMALISED = {"BNPOLoss": "the number of completion tokens", "DRGRPOLoss": "sequences x max length"}
# Advantage scales that are one number per step: with either, the advantages differ by a scalar only.
SCALAR_SCALES = {"none", "batch"}
LOSS_SCALE_KEYS = {"_target_", "max_completion_length"}  # loss keys that only change the normaliser


def _final(run: Run, key: str) -> float | None:
    series = run.metrics.get(key)
    return last_value(series) if series else None


def _variant_level(runs: list[Run], key: str) -> float | None:
    values = [v for v in (_final(r, key) for r in runs if r.finished) if v is not None]
    return float(np.mean(values)) if values else None


def ceiling(variants: dict[str, list[Run]]) -> DiagnosticResult:
    """Fires on every variant when their final accuracies sit within CEILING_SPREAD at a task limit."""
    result = DiagnosticResult("ceiling", "variants at the task's ceiling")
    finals = {label: _variant_level(runs, M.VAL_ACCURACY) for label, runs in variants.items()}
    finals = {label: v for label, v in finals.items() if v is not None}
    if len(finals) < 2 or max(finals.values()) - min(finals.values()) > CEILING_SPREAD:
        return result
    buckets = sorted(
        {
            k
            for runs in variants.values()
            for r in runs
            for k in r.metrics
            if k.startswith(M.VAL_ACCURACY_BY_LENGTH)
        },
        key=lambda k: int(k.rsplit("/", 1)[1]) if k.rsplit("/", 1)[1].isdigit() else 0,
    )
    by_length = {b: [_variant_level(variants[label], b) for label in finals] for b in buckets}
    stuck = [b for b, levels in by_length.items() if all(v is not None and v <= STUCK_LEVEL for v in levels)]
    saturated = min(finals.values()) >= SATURATED_LEVEL
    if not stuck and not saturated:
        return result
    span = f"final {M.VAL_ACCURACY} {min(finals.values()):.1%}..{max(finals.values()):.1%} over {len(finals)} variants"
    if stuck:
        parts = [
            f"answers of length {b.rsplit('/', 1)[1]}: {max(by_length[b]):.0%} at most in any variant"
            for b in stuck
        ]
        evidence = f"{span}; " + "; ".join(parts)
    else:
        evidence = f"{span}: every variant at or above {SATURATED_LEVEL:.0%}"
    result.advice = (
        "the task, not the loss, sets where the variants end: read the AUC or the steps to threshold instead of "
        "final accuracy, and make the task's limit learnable (task lengths, warmup.steps) or shorten "
        "trainer.max_steps so that the variants are compared before they saturate"
    )
    for label in finals:
        result.variants[label] = [Diagnosis("ceiling", evidence, result.advice)]
        result.seeds[label] = sum(1 for r in variants[label] if r.finished)
    return result


def _loss_name(config: dict) -> str:
    return str(config.get("loss", {}).get("_target_", "")).rsplit(".", 1)[-1]


def _same_but_normaliser(a: dict, b: dict) -> bool:
    """Whether configs `a` and `b` differ only by the loss's normaliser, under scalar-equivalent advantages."""
    skip = {"loss", "seed", "sweep_name", "advantage", "resume"}
    if {k: v for k, v in a.items() if k not in skip} != {k: v for k, v in b.items() if k not in skip}:
        return False
    la, lb = a.get("loss", {}), b.get("loss", {})
    params = {k for k in (*la, *lb) if k not in LOSS_SCALE_KEYS}
    if any(la.get(k) != lb.get(k) for k in params):
        return False
    sa, sb = (c.get("advantage", {}).get("scale") for c in (a, b))
    return sa == sb or {sa, sb} <= SCALAR_SCALES


def scalar_normaliser(variants: dict[str, list[Run]]) -> DiagnosticResult:
    """Fires on each pair of variants that are one objective up to a per-step scalar (see module docstring)."""
    result = DiagnosticResult("scalar_normaliser", "variants that differ only by a scalar normaliser")
    configs = {label: next((r.config for r in runs if r.config), None) for label, runs in variants.items()}
    for x, y in combinations([label for label, c in configs.items() if c], 2):
        cx, cy = configs[x], configs[y]
        names = _loss_name(cx), _loss_name(cy)
        if names[0] == names[1] or not set(names) <= set(SCALAR_NORMALISED):
            continue
        if not _same_but_normaliser(cx, cy):
            continue
        scale = cx.get("advantage", {}).get("scale"), cy.get("advantage", {}).get("scale")
        evidence = (
            f"{x} ({names[0]}, advantage.scale={scale[0]}) and {y} ({names[1]}, advantage.scale={scale[1]}): "
            f"the same clipped objective summed over the batch's tokens, divided by "
            f"{SCALAR_NORMALISED[names[0]]} or by {SCALAR_NORMALISED[names[1]]}, one number per step"
        )
        result.advice = (
            "their gradients point the same way at every step, so a difference between them measures the "
            "optimizer's step size, not the objective: give Dr.GRPO its paper's unscaled advantages "
            "(advantage=unscaled, +experiment=drgrpo_paper) to compare the two as published"
        )
        for label in (x, y):
            result.variants.setdefault(label, []).append(
                Diagnosis("scalar_normaliser", evidence, result.advice)
            )
            result.seeds[label] = len(variants[label])
    return result


def diagnose_variants(variants: dict[str, list[Run]]) -> list[DiagnosticResult]:
    """Every cross-variant diagnostic of this module, fired or not."""
    return [ceiling(variants), scalar_normaliser(variants)]
