"""Greedy validation: decode the held-out prompts and score them against their answers."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from twinkle_exp import metric_names as M
from twinkle_exp.models import Tokenizer
from twinkle_exp.rewards import NonFiniteRewardError, RewardSet, exact_match
from twinkle_exp.sampling.generate import generate
from twinkle_exp.tasks import Example

# Beyond this many distinct answer lengths (free-form answers: GSM8K) a per-length accuracy is noise.
MAX_LENGTH_BUCKETS = 16


def length_buckets(examples: list[Example]) -> list[int]:
    """The answer lengths the per-length accuracy is split by: every distinct one of the whole held-out set
    (the same list on every rank), or none when there are more than `MAX_LENGTH_BUCKETS`."""
    lengths = sorted({len(e.answer) for e in examples})
    return lengths if len(lengths) <= MAX_LENGTH_BUCKETS else []


@torch.no_grad()
def greedy_totals(
    model: nn.Module,
    tokenizer: Tokenizer,
    examples: list[Example],
    rewards: RewardSet,
    *,
    max_new_tokens: int,
    batch_size: int,
    buckets: list[int] | None = None,
    completion_answer: Callable[[str], str] | None = None,
) -> torch.Tensor:
    """`[3 + 2K]` float64 on the model's device: exact matches, summed total reward and number of `examples`
    of greedy completions, then (matches, count) for each of the K answer lengths in `buckets`. Sums, so
    shares of the held-out set decoded on different ranks add up. `completion_answer` takes the part of a
    completion that is compared with the answer (the task's; default: all of it). Restores the model's mode."""
    buckets = buckets or []
    was_training = model.training
    model.eval()
    correct, reward_sum = 0.0, 0.0
    by_length = torch.zeros(len(buckets), 2, dtype=torch.float64)  # [K, (matches, count)]
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        prompts, answers = [e.prompt for e in chunk], [e.answer for e in chunk]
        decoded = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, greedy=True)
        scored = (
            [completion_answer(c) for c in decoded.completions] if completion_answer else decoded.completions
        )
        matches = exact_match(prompts, scored, answers)
        # An answer cut off at the budget is not exact, whatever its text (see RewardSet.truncated_max).
        exact = [m if not cut else 0.0 for m, cut in zip(matches, decoded.truncated.tolist(), strict=True)]
        correct += sum(exact)
        for answer, hit in zip(answers, exact, strict=True):
            if len(answer) in buckets:
                by_length[buckets.index(len(answer))] += torch.tensor([hit, 1.0], dtype=torch.float64)
        try:
            reward_sum += float(rewards(prompts, decoded.completions, answers, decoded.truncated)[0].sum())
        except NonFiniteRewardError:  # the accuracy still counts; the mean reward is NaN, as its inputs
            reward_sum = float("nan")
    model.train(was_training)
    device = next(model.parameters()).device
    head = torch.tensor([correct, reward_sum, len(examples)], dtype=torch.float64)
    return torch.cat([head, by_length.flatten()]).to(device)


def validation_metrics(totals: torch.Tensor, buckets: list[int] | None = None) -> dict[str, float]:
    """Accuracy, mean reward and the accuracy per answer length in `buckets`, from `greedy_totals` (summed
    over every share of the held-out set)."""
    correct, reward_sum, count = totals[:3].tolist()
    metrics = {M.VAL_ACCURACY: correct / count, M.VAL_REWARD_MEAN: reward_sum / count}
    for length, (hits, n) in zip(buckets or [], totals[3:].view(-1, 2).tolist(), strict=True):
        metrics[M.VAL_ACCURACY_BY_LENGTH + str(length)] = hits / n if n else float("nan")
    return metrics
