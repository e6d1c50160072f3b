"""The statistic that decides each published finding of `conf/sweep/finding_*.yaml`, from a sweep's runs.

A finding compares two arms (a treatment and a control, named by one override each) on a per-run number,
and states the direction the paper claims. The effect is a difference or a ratio of the arms' means, with a
95% stratified percentile bootstrap interval (`stats`) and an exact two-sided permutation p-value of the
difference of means (`pairwise_stats`; for a ratio it tests the same null hypothesis, exchangeable seeds).
A finding is "reproduced" when p < ALPHA and the effect points the paper's way, "reproduced in the other
direction" when p < ALPHA and it points the other way, else "not reproduced". The CLI is `findings_main`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from twinkle_exp import metric_names as M

from .aggregate import accuracy_auc, first_step_reaching
from .metrics_csv import Series
from .pairwise_stats import permutation_p_value
from .runs import Run
from .stats import ALPHA, Estimate, as_scores, percentile_interval


def quarter_change(series: Series) -> float:
    """Mean of the last quarter of the logged values minus the mean of the first quarter."""
    values = np.array([v for _, v in series])
    k = max(1, len(values) // 4)
    return float(values[-k:].mean() - values[:k].mean())


def quarter_ratio(series: Series) -> float:
    """Mean of the last quarter of the logged values over the mean of the first quarter."""
    values = np.array([v for _, v in series])
    k = max(1, len(values) // 4)
    return float(values[-k:].mean() / values[:k].mean())


def run_mean(series: Series) -> float:
    return float(np.mean([v for _, v in series]))


@dataclass(frozen=True)
class Claim:
    """One finding: arms, the per-run number, how the arms are compared, and the paper's direction."""

    name: str
    source: str  # paper and arXiv id
    treatment: str  # an override that names the treatment arm's runs, e.g. "loss=grpo"
    control: str
    key: str  # the metric the per-run number is computed from
    per_run: Callable[[Series, Run], float | None]
    describe: str  # what the per-run number is, for the page
    effect: str  # "difference" (treatment - control) or "ratio" (treatment / control) of the arms' means
    # ">": the paper's direction is effect > null (0 for a difference, 1 for a ratio); ">=": "at least as
    # well", where only a significant effect the other way contradicts the paper
    expected: str
    diagnostics: tuple[str, ...] = ()  # metrics whose run means are shown per arm, to say why


def _from_series(fn: Callable[[Series], float]) -> Callable[[Series, Run], float]:
    return lambda series, run: fn(series)


def steps_to(series: Series, threshold: float) -> float:
    """First step with a value >= `threshold`; a run that never gets there counts as its last step
    (right-censored at max_steps: it shortens whichever arm is slower, so ratios are conservative)."""
    reached = first_step_reaching(series, threshold)
    return float(series[-1][0] if reached is None else reached)


# "Matches the baseline's performance": the threshold is THRESHOLD_SHARE of the way from the mean first
# (warm-start) accuracy to the baseline arm's mean final accuracy (for cispo_speed the baseline, DAPO's loss, is
# the claim's `treatment`: the ratio is baseline steps / CISPO steps), fixed by the data, never tuned.
THRESHOLD_SHARE = 0.9


def baseline_threshold(runs: list[Run], baseline: str, key: str) -> tuple[float, float]:
    """(threshold, start): the accuracy `THRESHOLD_SHARE` of the way from the runs' mean first value (start)
    to the baseline's mean last value; NaNs when no run logged `key`."""
    first = [r.metrics[key][0][1] for r in runs if r.finished and r.metrics.get(key)]
    last = [
        r.metrics[key][-1][1] for r in runs if r.finished and baseline in r.overrides and r.metrics.get(key)
    ]
    if not first or not last:
        return float("nan"), float("nan")
    start = float(np.mean(first))
    return start + THRESHOLD_SHARE * (float(np.mean(last)) - start), start


def _steps_to_control_level(series: Series, run: Run) -> float | None:
    return None  # replaced per sweep by `decide` (the threshold depends on the baseline arm's runs)


CLAIMS = {
    "drgrpo_length": Claim(
        "drgrpo_length",
        "Liu et al. 2025, Understanding R1-Zero-Like Training, arXiv 2503.20783",
        "loss=grpo",
        "loss=drgrpo",
        M.COMPLETION_LENGTH_INCORRECT,
        _from_series(quarter_change),
        "change in mean incorrect-completion length, last quarter of rollouts minus first (tokens)",
        "difference",
        ">",
        (
            M.COMPLETION_LENGTH_CORRECT,
            M.COMPLETION_LENGTH_INCORRECT,
            M.COMPLETION_CLIPPED_RATIO,
            M.VAL_ACCURACY,
        ),
    ),
    "gspo_clipping": Claim(
        "gspo_clipping",
        "Zheng et al. 2025, Group Sequence Policy Optimization, arXiv 2507.18071",
        "+experiment=gspo_paper",
        "+experiment=grpo_gspo_baseline",
        M.CLIP_REGION,
        _from_series(run_mean),
        "mean share of clipped completion tokens over the run",
        "ratio",
        ">",
        (M.CLIP_LOW, M.CLIP_HIGH, M.RATIO_MIN, M.RATIO_MAX),
    ),
    "gspo_accuracy": Claim(
        "gspo_accuracy",
        "Zheng et al. 2025, Group Sequence Policy Optimization, arXiv 2507.18071",
        "+experiment=gspo_paper",
        "+experiment=grpo_gspo_baseline",
        M.VAL_ACCURACY,
        _from_series(accuracy_auc),
        "area under the greedy validation accuracy curve (mean accuracy over training)",
        "difference",
        ">=",
        (M.VAL_ACCURACY, M.REWARD_MEAN),
    ),
    "cispo_speed": Claim(
        "cispo_speed",
        "MiniMax 2025, MiniMax-M1, arXiv 2506.13585",
        "loss=bnpo",
        "loss=cispo",
        M.VAL_ACCURACY,
        _steps_to_control_level,
        f"optimizer steps to the greedy validation accuracy {THRESHOLD_SHARE:.0%} of the way from the warm-start "
        "to the DAPO arm's mean final accuracy (never reached: the run's last step)",
        "ratio",
        ">",
        (M.CLIP_REGION, M.CISPO_CLIP, M.VAL_ACCURACY, M.GRAD_NORM),
    ),
    "dapo_entropy": Claim(
        "dapo_entropy",
        "Yu et al. 2025, DAPO, arXiv 2503.14476",
        "loss.clip_range_high=0.28",
        "loss.clip_range_high=0.2",
        M.ENTROPY,
        _from_series(quarter_ratio),
        "mean policy entropy over the last quarter of steps / over the first quarter",
        "ratio",
        ">",
        (M.CLIP_HIGH, M.CLIP_HIGH_GIVEN_POSITIVE, M.LOW_PROB_GIVEN_HIGH, M.GRAD_NORM, M.VAL_ACCURACY),
    ),
}


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    treatment: list[float]  # the per-run numbers, finished runs in seed order
    control: list[float]
    effect: Estimate
    p_value: float | None
    verdict: str
    threshold: float | None = None  # the accuracy a steps-to-threshold claim was measured at


def _ratio_of_means(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis) / np.mean(y, axis=axis)


def _difference_of_means(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


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
    if claim.per_run is _steps_to_control_level:
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
    statistic = _ratio_of_means if claim.effect == "ratio" else _difference_of_means
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
