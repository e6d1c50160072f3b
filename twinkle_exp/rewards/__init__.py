"""Verifiable reward functions and their weighted combination (`RewardSet`).

Text rewards (exact match, partial credit, length penalty, format) live in `text`, the math checker in
`math_reward`; every one has the signature `fn(prompts, completions, answers) -> list[float]`.
"""

from twinkle_exp.rewards.math_reward import MathReward, math_reward
from twinkle_exp.rewards.random_reward import RandomReward, random_reward
from twinkle_exp.rewards.reward_set import (
    NonFiniteRewardError,
    RewardFn,
    RewardFunction,
    RewardSet,
    build_rewards,
)
from twinkle_exp.rewards.text import (
    AnswerAfterSeparator,
    FormatReward,
    LengthPenalty,
    answer_after_separator,
    exact_match,
    format_reward,
    length_penalty,
    partial_credit,
)

__all__ = [
    "AnswerAfterSeparator",
    "answer_after_separator",
    "FormatReward",
    "LengthPenalty",
    "MathReward",
    "NonFiniteRewardError",
    "RewardFn",
    "RewardFunction",
    "RewardSet",
    "build_rewards",
    "exact_match",
    "format_reward",
    "length_penalty",
    "math_reward",
    "partial_credit",
    "RandomReward",
    "random_reward",
]
