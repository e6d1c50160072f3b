"""Diagnostics of the learning signal and the reward in one run: groups without reward spread, entropy
collapse, and a reward rising on cut-off completions or on ones that repeat the prompt. Each returns a
`Diagnosis` or None; thresholds as in `updates`.
"""

from __future__ import annotations

import numpy as np

from twinkle_exp import metric_names as M
from twinkle_exp.tracking.metrics_csv import Series

from ..series import first_quarter, last_quarter, values
from .diagnosis import Diagnosis, config_at, last_quarter_start, step_ranges

ZERO_STD_LEVEL, ZERO_STD_FRACTION = 0.9, 0.5  # default run: at most 0.81 at any step
ENTROPY_DROP = 0.1  # default run: last quarter at ~35% of the first value (0.74 -> 0.26 nats)
TRUNCATED_LEVEL, TRUNCATED_FRACTION = 0.5, 0.5  # default run: its 8-token answers end with EOS
REWARD_RISE = 0.1  # the last quarter's mean reward above the first quarter's by at least this much


def zero_std_groups(metrics: dict[str, Series], config: dict) -> Diagnosis | None:
    """Most groups have identical rewards (zero advantage): little or no learning signal."""
    series = metrics.get(M.FRAC_REWARD_ZERO_STD, [])
    if not series:
        return None
    shares = values(series)
    high = shares >= ZERO_STD_LEVEL
    if high.mean() < ZERO_STD_FRACTION:
        return None
    first = series[int(np.argmax(high))][0]
    return Diagnosis(
        "zero_std_groups",
        f"{M.FRAC_REWARD_ZERO_STD} >= {ZERO_STD_LEVEL:g} at {high.sum()} of {len(shares)} logged steps "
        f"(first at step {first}; mean {shares.mean():.2f})",
        f"groups whose {config_at(config, 'rollout.group_size')} completions all get the same reward give zero "
        "advantage: raise rollout.group_size or rollout.temperature, or change the reward (partial credit) "
        "or the task's difficulty so that completions of one prompt disagree",
    )


def entropy_collapse(metrics: dict[str, Series], config: dict) -> Diagnosis | None:
    """train/entropy over the last quarter below ENTROPY_DROP x its first logged value."""
    series = metrics.get(M.ENTROPY, [])
    if len(series) < 4 or series[0][1] <= 0:
        return None
    start, end = series[0][1], values(last_quarter(series)).mean()
    if end >= ENTROPY_DROP * start:
        return None
    return Diagnosis(
        "entropy_collapse",
        f"{M.ENTROPY} fell from {start:.3g} (step {series[0][0]}) to a mean of {end:.3g} over steps "
        f"{last_quarter_start(series)}-{series[-1][0]} ({end / start - 1:+.0%})",
        "the policy samples nearly the same completion every time, so groups stop disagreeing: raise "
        "loss.clip_range_high (clip-higher, +experiment=dapo_clip_higher), lower optim.lr, or raise "
        "rollout.temperature",
    )


def _reward_rise_while(metrics: dict[str, Series], key: str) -> str | None:
    """The evidence that M.REWARD_MEAN rose while `key` (a share of completions) was above TRUNCATED_LEVEL
    at most logged steps, or None."""
    shares, rewards = metrics.get(key, []), metrics.get(M.REWARD_MEAN, [])
    if len(shares) < 4 or len(rewards) < 4:
        return None
    most = [step for step, v in shares if v > TRUNCATED_LEVEL]
    first = first_quarter(rewards)
    start, end = values(first).mean(), values(last_quarter(rewards)).mean()
    if len(most) < TRUNCATED_FRACTION * len(shares) or end - start < REWARD_RISE:
        return None
    return (
        f"{key} > {TRUNCATED_LEVEL:g} at {len(most)} of {len(shares)} logged steps ({step_ranges(most)}) while "
        f"{M.REWARD_MEAN} rose from {start:.3g} (steps {first[0][0]}-{first[-1][0]}) to {end:.3g} "
        f"(steps {last_quarter_start(rewards)}-{rewards[-1][0]})"
    )


READ_SAMPLES = (
    "read a few completions (quoted here from the run's samples.jsonl, which keeps some of every rollout)"
)


def truncated_reward_rise(metrics: dict[str, Series], config: dict) -> Diagnosis | None:
    """The reward rises while most completions end at rollout.max_new_tokens: learning or a reward hack?"""
    return _reward_rise(
        "truncated_reward_rise",
        metrics,
        M.COMPLETION_CLIPPED_RATIO,
        f"most completions stop at rollout.max_new_tokens = {config_at(config, 'rollout.max_new_tokens')} without "
        f"ending, so the reward is scoring unfinished text: {READ_SAMPLES} and {M.VAL_ACCURACY}; a reward "
        "that credits the question restated is a hack. Raise rollout.max_new_tokens, ask for a shorter "
        "answer, or keep reward.truncated_max = 0",
    )


def repeated_prompt_reward_rise(metrics: dict[str, Series], config: dict) -> Diagnosis | None:
    """The reward rises while most completions repeat their prompt: the reward may pay for the question."""
    return _reward_rise(
        "repeated_prompt_reward_rise",
        metrics,
        M.COMPLETION_REPEATS_PROMPT_RATIO,
        f"most completions restate their prompt, so the reward may be paying for the question rather than "
        f"an answer: {READ_SAMPLES} and {M.VAL_ACCURACY} (a worked answer may quote its question "
        "legitimately). Score only the final answer (reward=math does) and ask the prompt for just the answer",
    )


def _reward_rise(diagnostic: str, metrics: dict[str, Series], key: str, advice: str) -> Diagnosis | None:
    """The diagnosis of a reward that rose while `key` held for most completions, or None."""
    evidence = _reward_rise_while(metrics, key)
    return None if evidence is None else Diagnosis(diagnostic, evidence, advice)
