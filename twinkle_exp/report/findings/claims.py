"""The statistic that decides each published finding of `conf/sweep/finding_*.yaml`, from a sweep's runs.

A finding compares two arms (a treatment and a control, named by one override each) on a per-run number,
and states the direction the paper claims; `verdict.decide` computes its effect and verdict, and the CLI is
`python -m twinkle_exp.report.findings`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from twinkle_exp import metric_names as M

from ..loading.metrics_csv import Series
from ..loading.runs import Run
from ..statistics.series import first_quarter, last_quarter, values


def quarter_change(series: Series) -> float:
    """Mean of the last quarter of the logged values minus the mean of the first quarter."""
    return float(values(last_quarter(series)).mean() - values(first_quarter(series)).mean())


def quarter_ratio(series: Series) -> float:
    """Mean of the last quarter of the logged values over the mean of the first quarter."""
    return float(values(last_quarter(series)).mean() / values(first_quarter(series)).mean())


def run_mean(series: Series) -> float:
    return float(np.mean(values(series)))


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
    margin: float | None = None  # a declared equivalence margin of the difference (per-run number's units)


def _from_series(fn: Callable[[Series], float]) -> Callable[[Series, Run], float]:
    return lambda series, run: fn(series)


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


def steps_to_baseline_level(series: Series, run: Run) -> float | None:
    """Replaced per sweep by `verdict.decide`: the threshold depends on the baseline arm's runs, and each
    run counts min(steps to it, the earliest last step of both arms) (`statistics.threshold`, as the report)."""
    return None


def auc_on_shared_grid(series: Series, run: Run) -> float | None:
    """Replaced per sweep by `verdict.decide`: the AUC over the span of steps every run of both arms covers
    (`statistics.aggregate.grid_score`, as the report), so validation spacing does not change it."""
    return None


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
        auc_on_shared_grid,
        "area under the greedy validation accuracy curve (mean accuracy over the steps both arms cover)",
        "difference",
        ">=",
        (M.VAL_ACCURACY, M.REWARD_MEAN),
        margin=0.02,  # the report's default AUC margin: 2 accuracy points
    ),
    "cispo_speed": Claim(
        "cispo_speed",
        "MiniMax 2025, MiniMax-M1, arXiv 2506.13585",
        "loss=bnpo",
        "loss=cispo",
        M.VAL_ACCURACY,
        steps_to_baseline_level,
        f"optimizer steps to the greedy validation accuracy {THRESHOLD_SHARE:.0%} of the way from the warm-start "
        "to the DAPO arm's mean final accuracy, restricted to the earliest last step of both arms (never reached: "
        "that step)",
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
