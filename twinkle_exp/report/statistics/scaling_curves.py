"""A variant's runs as ScaleRL curves: each run's score against the samples (or completion tokens) it drew,
the sigmoid fitted per run (`sigmoid_fit`), its intervals over the seeds, the first-half fit's error on the
second half, and whether the ranking of the variants by A is the ranking by AUC."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from twinkle_exp import metric_names as M
from twinkle_exp.summary.series import accuracy_auc

from ..loading.runs import Run
from .intervals import Interval, mean_interval
from .sigmoid_fit import (
    SigmoidFit,
    extrapolation_check,
    fit_sigmoid,
    intervals_over_seeds,
    samples_drawn,
    tokens_drawn,
)

AXES = ("samples", "tokens")


def _setting(run: Run, group: str, key: str) -> int:
    try:
        return int(run.config[group][key])
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"{run.name}: its .hydra/config.yaml has no {group}.{key}, which the compute axis needs"
        ) from None


def run_curve(run: Run, score: str = M.VAL_ACCURACY, axis: str = "samples") -> tuple[np.ndarray, np.ndarray]:
    """`run`'s `score` `[n]` against the compute drawn by each of its logged steps `[n]` (`axis`)."""
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
    series = run.metrics.get(score)
    if not series:
        raise ValueError(f"{run.name}: no {score} logged")
    steps = np.array([s for s, _ in series], dtype=float)
    per_rollout = _setting(run, "rollout", "prompts_per_step") * _setting(run, "rollout", "group_size")
    if axis == "samples":
        steps_per_rollout = _setting(run, "optim", "mu") * _setting(run, "optim", "num_minibatches")
        c = samples_drawn(steps, steps_per_rollout, per_rollout)
    else:
        lengths = run.metrics.get(M.COMPLETION_MEAN_LENGTH) or []
        if not lengths:
            raise ValueError(f"{run.name}: no {M.COMPLETION_MEAN_LENGTH} logged, which the tokens axis needs")
        c = tokens_drawn(steps, [s for s, _ in lengths], [v for _, v in lengths], per_rollout)
    return c, np.array([v for _, v in series], dtype=float)


@dataclass(frozen=True)
class VariantCurves:
    fits: list[SigmoidFit]  # one per run, on all its points
    intervals: dict[str, Interval]  # A, B, C_mid (geometric), R0 over the runs
    extrapolation_error: Interval  # the first-half fits' mean |error| on the second halves, over the runs
    auc: Interval  # the score's AUC (series.accuracy_auc), over the runs


def fit_variant(
    runs: list[Run],
    score: str = M.VAL_ACCURACY,
    axis: str = "samples",
    a_range: tuple[float, float] | None = (0.0, 1.0),
) -> VariantCurves:
    """The sigmoid of each of `runs` (a variant's seeds); `a_range` bounds A (a pass rate's: 0 to 1)."""
    curves = [run_curve(run, score, axis) for run in runs]
    fits = [fit_sigmoid(c, r, a_range=a_range) for c, r in curves]
    errors = [extrapolation_check(c, r, a_range=a_range).mean_abs_error for c, r in curves]
    aucs = [accuracy_auc(run.metrics[score]) for run in runs]
    return VariantCurves(fits, intervals_over_seeds(fits), mean_interval(errors), mean_interval(aucs))


def rankings_agree(variants: dict[str, VariantCurves]) -> bool:
    """Whether ordering the variants by mean A gives the order by mean AUC."""
    by_a = sorted(variants, key=lambda v: variants[v].intervals["A"].value)
    by_auc = sorted(variants, key=lambda v: variants[v].auc.value)
    return by_a == by_auc
