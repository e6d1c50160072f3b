"""Verifiable reward functions and their weighted combination (`RewardSet`).

Text rewards (exact match, partial credit, length penalty) live in `text`; every one has the signature
`fn(prompts, completions, answers) -> list[float]`.
"""

from twinkle_exp.rewards.reward_set import RewardFn, RewardFunction, RewardSet, build_rewards
from twinkle_exp.rewards.text import (
    LengthPenalty,
    exact_match,
    length_penalty,
    partial_credit,
)

__all__ = [
    "LengthPenalty",
    "RewardFn",
    "RewardFunction",
    "RewardSet",
    "build_rewards",
    "exact_match",
    "length_penalty",
    "partial_credit",
]
