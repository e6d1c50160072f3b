"""Traps that make a comparison of GRPO-family losses mislead, detected in one run's metrics and config.

Pure functions: `run_checks(metrics, nonfinite, config)` -> the findings of one run, each with its evidence
(which metric, which steps, which values) and what to change. They read metrics by key and step only, so they
work whether a metric was logged once per rollout or once per optimizer step. Thresholds are set so that the
default experiment (`python -m twinkle_exp`) passes every check; the values it measured are noted beside each.
The cross-run check (variants with identical curves) is in `checks_sweep`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from twinkle_exp import metric_names as M

from .metrics_csv import Series

GRAD_CLIP_FRACTION = 0.9  # default run: 54-64% of logged steps above optim.max_grad_norm = 1
ZERO_STD_LEVEL, ZERO_STD_FRACTION = 0.9, 0.5  # default run: at most 0.81 at any step
ENTROPY_DROP = 0.1  # default run: last quarter at ~35% of the first value (0.74 -> 0.26 nats)
CLIP_MEDIAN = 0.1  # default run: median 0.6% of tokens
KL_GROWTH, KL_FLOOR = 2.0, 0.5  # default run: last quarter 0.20-0.25 nats, 1.3-1.7x the second quarter
# KL growth that buys held-out accuracy is learning, not drift: the default run moves from a 26% warm-start to
# about 85%, and its KL to that warm-start grows about 6x (0.11 -> 0.66 nats) while val/accuracy gains ~30 points.
KL_PAID_GAIN = 0.05
TRUNCATED_LEVEL, TRUNCATED_FRACTION = 0.5, 0.5  # default run: its 8-token answers end with EOS
REWARD_RISE = 0.1  # the last quarter's mean reward above the first quarter's by at least this much
RATIO_TOLERANCE = 1e-3  # |r - 1| below this counts as "ratio exactly 1" (sampler and trainer forward differ)


@dataclass(frozen=True)
class Finding:
    """One trap found in one run: `check` is the id of the check (a key of CHECKS)."""

    check: str
    evidence: str  # which metric, which steps, which values
    advice: str  # what to change, naming config keys


def on_policy(metrics: dict[str, Series], config: dict) -> Finding | None:
    """optim.mu = 1 with one minibatch: every update is on-policy, every ratio 1, clipping never binds."""
    mu, minibatches = _cfg(config, "optim.mu"), _cfg(config, "optim.num_minibatches")
    lows, highs = _values(metrics, M.RATIO_MIN), _values(metrics, M.RATIO_MAX)
    flat = len(lows) > 0 and len(highs) > 0
    flat = flat and np.all(np.abs(lows - 1) < RATIO_TOLERANCE) and np.all(np.abs(highs - 1) < RATIO_TOLERANCE)
    if not (mu == 1 and minibatches == 1) and not flat:
        return None
    evidence = [f"optim.mu = {mu}, optim.num_minibatches = {minibatches}"] if mu == minibatches == 1 else []
    if flat:
        evidence.append(
            f"{M.RATIO_MIN} and {M.RATIO_MAX} within {RATIO_TOLERANCE:g} of 1 at all {len(lows)} logged steps"
        )
    return Finding(
        "on_policy",
        "; ".join(evidence),
        "every importance ratio is 1, so GRPO, GSPO, SAPO (and BNPO, CISPO) differ only by their normaliser "
        "and no clip ever binds: set optim.mu >= 2 or optim.num_minibatches >= 2 to compare the losses themselves",
    )


def grad_clip_every_step(metrics: dict[str, Series], config: dict) -> Finding | None:
    """train/grad_norm (before clipping) above optim.max_grad_norm on (nearly) every logged step."""
    limit, series = _cfg(config, "optim.max_grad_norm"), metrics.get(M.GRAD_NORM, [])
    if not isinstance(limit, (int, float)) or limit <= 0 or not series:
        return None
    norms = np.array([v for _, v in series])
    above = norms > limit
    if above.mean() < GRAD_CLIP_FRACTION:
        return None
    return Finding(
        "grad_clip_every_step",
        f"{M.GRAD_NORM} > optim.max_grad_norm = {limit:g} at {above.sum()} of {len(norms)} logged steps "
        f"(median {np.median(norms):.3g}, steps {series[0][0]}-{series[-1][0]})",
        "every update is rescaled to the same norm, so variants that differ only by a scalar normaliser "
        "(BNPO, Dr.GRPO, CISPO without caps) make the same updates: raise optim.max_grad_norm above the typical "
        f"norm (e.g. {2 * np.median(norms):.2g}) or lower optim.lr",
    )


def zero_std_groups(metrics: dict[str, Series], config: dict) -> Finding | None:
    """Most groups have identical rewards (zero advantage): little or no learning signal."""
    series = metrics.get(M.FRAC_REWARD_ZERO_STD, [])
    if not series:
        return None
    values = np.array([v for _, v in series])
    high = values >= ZERO_STD_LEVEL
    if high.mean() < ZERO_STD_FRACTION:
        return None
    first = series[int(np.argmax(high))][0]
    return Finding(
        "zero_std_groups",
        f"{M.FRAC_REWARD_ZERO_STD} >= {ZERO_STD_LEVEL:g} at {high.sum()} of {len(values)} logged steps "
        f"(first at step {first}; mean {values.mean():.2f})",
        f"groups whose {_cfg(config, 'rollout.group_size')} completions all get the same reward give zero "
        "advantage: raise rollout.group_size or rollout.temperature, or change the reward (partial credit) "
        "or the task's difficulty so that completions of one prompt disagree",
    )


def entropy_collapse(metrics: dict[str, Series], config: dict) -> Finding | None:
    """train/entropy over the last quarter below ENTROPY_DROP x its first logged value."""
    series = metrics.get(M.ENTROPY, [])
    if len(series) < 4 or series[0][1] <= 0:
        return None
    start, end = series[0][1], _last_quarter(series).mean()
    if end >= ENTROPY_DROP * start:
        return None
    return Finding(
        "entropy_collapse",
        f"{M.ENTROPY} fell from {start:.3g} (step {series[0][0]}) to a mean of {end:.3g} over steps "
        f"{_last_quarter_start(series)}-{series[-1][0]} ({end / start - 1:+.0%})",
        "the policy samples nearly the same completion every time, so groups stop disagreeing: raise "
        "loss.clip_range_high (clip-higher, +experiment=dapo_clip_higher), lower optim.lr, or raise "
        "rollout.temperature",
    )


def high_clip_fraction(metrics: dict[str, Series], config: dict) -> Finding | None:
    """Median clip fraction above CLIP_MEDIAN: updates far off-policy, most tokens without gradient."""
    for key in (M.CLIP_REGION, M.CISPO_CLIP):
        series = metrics.get(key, [])
        values = np.array([v for _, v in series])
        if len(values) and np.median(values) > CLIP_MEDIAN:
            peak = int(np.argmax(values))
            return Finding(
                "high_clip_fraction",
                f"{key}: median {np.median(values):.1%} of tokens over {len(values)} logged steps "
                f"(max {values[peak]:.1%} at step {series[peak][0]})",
                "clip fractions should stay at a few percent: lower optim.lr, optim.mu or "
                "optim.num_minibatches (fewer updates per rollout), or widen loss.clip_range",
            )
    return None


def growing_kl(metrics: dict[str, Series], config: dict) -> Finding | None:
    """KL to the reference over the last quarter >= KL_GROWTH x the second quarter's, and >= KL_FLOOR nats,
    while val/accuracy (when logged) gained less than KL_PAID_GAIN between the same two spans."""
    series = metrics.get(M.KL, [])
    if len(series) < 8:
        return None
    quarter = len(series) // 4
    middle = np.mean([v for _, v in series[quarter : 2 * quarter]])
    end = _last_quarter(series).mean()
    if end < KL_FLOOR or end < KL_GROWTH * middle:
        return None
    spans = (series[quarter][0], series[2 * quarter - 1][0]), (_last_quarter_start(series), series[-1][0])
    accuracy = [_mean_over(metrics.get(M.VAL_ACCURACY, []), *span) for span in spans]
    paid = ""
    if None not in accuracy:
        if accuracy[1] - accuracy[0] >= KL_PAID_GAIN:
            return None
        paid = f", while {M.VAL_ACCURACY} went from {accuracy[0]:.1%} to {accuracy[1]:.1%}"
    return Finding(
        "growing_kl",
        f"{M.KL}: mean {middle:.3g} over steps {spans[0][0]}-{spans[0][1]}, "
        f"{end:.3g} over steps {spans[1][0]}-{spans[1][1]} (x{end / max(middle, 1e-12):.1f}){paid}",
        f"the policy keeps moving away from the reference without gaining held-out accuracy: raise loss.beta "
        f"(now {_cfg(config, 'loss.beta')}), lower optim.lr, or check the reward for a shortcut the policy exploits",
    )


def _mean_over(series: Series, first: int, last: int) -> float | None:
    """The mean of `series` over steps first..last; its last value before `first` if none falls there; None
    when it has no value by `last`."""
    inside = [v for step, v in series if first <= step <= last]
    if inside:
        return float(np.mean(inside))
    before = [v for step, v in series if step < first]
    return before[-1] if before else None


def _reward_rise_while(metrics: dict[str, Series], key: str) -> str | None:
    """The evidence that M.REWARD_MEAN rose while `key` (a share of completions) was above TRUNCATED_LEVEL
    at most logged steps, or None."""
    shares, rewards = metrics.get(key, []), metrics.get(M.REWARD_MEAN, [])
    if len(shares) < 4 or len(rewards) < 4:
        return None
    most = [step for step, v in shares if v > TRUNCATED_LEVEL]
    quarter = max(1, len(rewards) // 4)
    start, end = np.mean([v for _, v in rewards[:quarter]]), _last_quarter(rewards).mean()
    if len(most) < TRUNCATED_FRACTION * len(shares) or end - start < REWARD_RISE:
        return None
    return (
        f"{key} > {TRUNCATED_LEVEL:g} at {len(most)} of {len(shares)} logged steps ({step_ranges(most)}) while "
        f"{M.REWARD_MEAN} rose from {start:.3g} (steps {rewards[0][0]}-{rewards[quarter - 1][0]}) to {end:.3g} "
        f"(steps {_last_quarter_start(rewards)}-{rewards[-1][0]})"
    )


# The report reads metrics.csv only; the sample completions go to wandb's table, which it does not read.
READ_SAMPLES = (
    "read a few completions (the run's log quotes some with its warning; wandb's samples table holds more)"
)


def truncated_reward_rise(metrics: dict[str, Series], config: dict) -> Finding | None:
    """The reward rises while most completions end at rollout.max_new_tokens: learning or a reward hack?"""
    evidence = _reward_rise_while(metrics, M.COMPLETION_CLIPPED_RATIO)
    if evidence is None:
        return None
    return Finding(
        "truncated_reward_rise",
        evidence,
        f"most completions stop at rollout.max_new_tokens = {_cfg(config, 'rollout.max_new_tokens')} without "
        f"ending, so the reward is scoring unfinished text: {READ_SAMPLES} and {M.VAL_ACCURACY}; a reward "
        "that credits the question restated is a hack. Raise rollout.max_new_tokens, ask for a shorter "
        "answer, or keep reward.truncated_max = 0",
    )


def repeated_prompt_reward_rise(metrics: dict[str, Series], config: dict) -> Finding | None:
    """The reward rises while most completions repeat their prompt: the reward may pay for the question."""
    evidence = _reward_rise_while(metrics, M.COMPLETION_REPEATS_PROMPT_RATIO)
    if evidence is None:
        return None
    return Finding(
        "repeated_prompt_reward_rise",
        evidence,
        f"most completions restate their prompt, so the reward may be paying for the question rather than "
        f"an answer: {READ_SAMPLES} and {M.VAL_ACCURACY} (a worked answer may quote its question "
        "legitimately). Score only the final answer (reward=math does) and ask the prompt for just the answer",
    )


def nonfinite_values(nonfinite: dict[str, list[int]], config: dict) -> Finding | None:
    """Any metric logged as NaN or +-inf."""
    if not nonfinite:
        return None
    first = min(steps[0] for steps in nonfinite.values())
    keys = ", ".join(f"{key} ({len(steps)} steps)" for key, steps in sorted(nonfinite.items()))
    return Finding(
        "nonfinite",
        f"NaN or inf from step {first}: {keys}",
        "lower optim.lr or optim.max_grad_norm, use trainer.precision=32-true, and check the reward "
        "functions for NaN; the report leaves these values out of every statistic",
    )


# id -> (title, check on (metrics, config)); nonfinite_values reads the run's non-finite cells instead.
CHECKS: dict[str, tuple[str, Callable]] = {
    "on_policy": ("strictly on-policy updates", on_policy),
    "grad_clip_every_step": ("gradient-norm clipping on every step", grad_clip_every_step),
    "zero_std_groups": ("groups with identical rewards", zero_std_groups),
    "entropy_collapse": ("entropy collapse", entropy_collapse),
    "high_clip_fraction": ("high clip fraction", high_clip_fraction),
    "growing_kl": ("KL growing without bound", growing_kl),
    "truncated_reward_rise": ("reward rising on cut-off completions", truncated_reward_rise),
    "repeated_prompt_reward_rise": (
        "reward rising on completions that repeat the prompt",
        repeated_prompt_reward_rise,
    ),
    "nonfinite": ("non-finite values", nonfinite_values),
}


def run_checks(metrics: dict[str, Series], nonfinite: dict[str, list[int]], config: dict) -> list[Finding]:
    """Every check of CHECKS on one run, in CHECKS order; `config` is the job's resolved config (nested dict)."""
    findings = []
    for check, (_title, fn) in CHECKS.items():
        finding = fn(nonfinite, config) if check == "nonfinite" else fn(metrics, config)
        if finding is not None:
            findings.append(finding)
    return findings


def _cfg(config: dict, dotted: str):
    """config["a"]["b"] for "a.b", or None when any level is missing."""
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _values(metrics: dict[str, Series], key: str) -> np.ndarray:
    """The values of metric `key`, `[num_logged_steps]` (empty if not logged)."""
    return np.array([v for _, v in metrics.get(key, [])])


def _last_quarter(series: Series) -> np.ndarray:
    """The values of the last quarter of the logged steps (at least one), `[n]`."""
    return np.array([v for _, v in series[-max(1, len(series) // 4) :]])


def _last_quarter_start(series: Series) -> int:
    """The first step of the last quarter of the logged steps."""
    return series[-max(1, len(series) // 4)][0]


def step_ranges(steps: list[int]) -> str:
    """`[0, 2, 4, 6, 10]` -> "0-6, 10": runs of equally spaced steps written as ranges."""
    if not steps:
        return ""
    gap = min((b - a for a, b in zip(steps, steps[1:], strict=False) if b > a), default=1)
    parts, start = [], steps[0]
    for prev, cur in zip(steps, [*steps[1:], None], strict=True):
        if cur is None or cur - prev != gap:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = cur
    return ", ".join(parts)
