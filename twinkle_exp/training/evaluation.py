"""Greedy validation: decode the held-out prompts and score them against their answers."""

from __future__ import annotations

import torch
from torch import nn

from twinkle_exp import metric_names as M
from twinkle_exp.models import Tokenizer
from twinkle_exp.rewards import NonFiniteRewardError, RewardSet, exact_match
from twinkle_exp.sampling.generate import SamplingOptions, generate
from twinkle_exp.tasks import Example


@torch.no_grad()
def greedy_totals(
    model: nn.Module,
    tokenizer: Tokenizer,
    examples: list[Example],
    rewards: RewardSet,
    *,
    max_new_tokens: int,
    batch_size: int,
) -> torch.Tensor:
    """`[3]` float64 on the model's device: correct answers, summed total reward and number of `examples`,
    of greedy completions. Sums, so shares of the held-out set decoded on different ranks add up.
    Restores the model's mode.

    Correct is the verdict of the reward function that gives one (`RewardSet.verdict`: reward=math), else
    exact match; a completion cut off at the budget is never correct."""
    was_training = model.training
    model.eval()
    correct, reward_sum = 0.0, 0.0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        prompts, answers = [e.prompt for e in chunk], [e.answer for e in chunk]
        decoded = generate(
            model, tokenizer, prompts, SamplingOptions(max_new_tokens=max_new_tokens, greedy=True)
        )
        matches = None
        try:
            total, raw = rewards(prompts, decoded.completions, answers, decoded.truncated)
            reward_sum += float(total.sum())
            matches = _verdicts(rewards, raw)
        except NonFiniteRewardError:  # the accuracy still counts; the mean reward is NaN, as its inputs
            reward_sum = float("nan")
        if matches is None:
            matches = _verdicts_alone(rewards, prompts, decoded.completions, answers)
        # An answer cut off at the budget is not correct, whatever its text (see RewardSet.truncated_max).
        correct += sum(m for m, cut in zip(matches, decoded.truncated.tolist(), strict=True) if not cut)
    model.train(was_training)
    device = next(model.parameters()).device
    return torch.tensor([correct, reward_sum, len(examples)], dtype=torch.float64, device=device)


def _verdicts(rewards: RewardSet, raw: dict[str, torch.Tensor]) -> list[float] | None:
    verdict = rewards.verdict()
    return None if verdict is None else [float(v == 1.0) for v in raw[verdict.name].tolist()]


def _verdicts_alone(
    rewards: RewardSet, prompts: list[str], completions: list[str], answers: list[str]
) -> list[float]:
    verdict = rewards.verdict()
    if verdict is None:
        return exact_match(prompts, completions, answers)
    return [float(v == 1.0) for v in verdict.fn(prompts, completions, answers)]


def validation_metrics(totals: torch.Tensor) -> dict[str, float]:
    """Accuracy and mean reward from `greedy_totals` `[3]` (summed over every share of the held-out set)."""
    correct, reward_sum, count = totals.tolist()
    return {M.VAL_ACCURACY: correct / count, M.VAL_REWARD_MEAN: reward_sum / count}
