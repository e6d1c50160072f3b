"""Held-out validation: decode the held-out prompts greedily (and, with trainer.val_samples, sample n
completions of each) and score them against their answers."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from twinkle_exp import metric_names as M
from twinkle_exp.config.schema import ValSamplesConfig
from twinkle_exp.models import Tokenizer
from twinkle_exp.rewards import NonFiniteRewardError, RewardSet, exact_match
from twinkle_exp.sampling.generate import RolloutBatch, SamplingOptions, generate
from twinkle_exp.tasks import Example
from twinkle_exp.training.pass_at_k import check_ks, pass_at_k
from twinkle_exp.training.rollout_metrics import TRUNCATED_MOST

log = logging.getLogger(__name__)
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
    per_item: list[float] | None = None,
) -> torch.Tensor:
    """`[4 + 2K]` float64 on the model's device: correct answers, summed total reward, number of `examples`
    and of those cut off at the budget, of greedy completions, then (correct, count) for each of the K answer
    lengths in `buckets`.
    Sums, so shares of the held-out set decoded on different ranks add up. Restores the model's mode.

    Correct is the verdict of the reward function that gives one (`RewardSet.verdict`: reward=math), else
    exact match of `completion_answer(completion)` (the task's part of it that is the answer; default: all
    of it); a completion cut off at the budget is never correct. `per_item`: when given, each example's
    correctness (1.0 / 0.0) is appended to it, in `examples` order (items.jsonl)."""
    buckets = buckets or []
    was_training = model.training
    model.eval()
    correct, reward_sum, cut_off = 0.0, 0.0, 0.0
    by_length = torch.zeros(len(buckets), 2, dtype=torch.float64)  # [K, (correct, count)]
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        prompts, answers = [e.prompt for e in chunk], [e.answer for e in chunk]
        decoded = generate(
            model, tokenizer, prompts, SamplingOptions(max_new_tokens=max_new_tokens, greedy=True)
        )
        hits, chunk_reward = _scored(rewards, prompts, answers, decoded, completion_answer)
        reward_sum += chunk_reward
        correct += sum(hits)
        if per_item is not None:
            per_item.extend(hits)
        cut_off += float(decoded.truncated.sum())
        for answer, hit in zip(answers, hits, strict=True):
            if len(answer) in buckets:
                by_length[buckets.index(len(answer))] += torch.tensor([hit, 1.0], dtype=torch.float64)
    model.train(was_training)
    device = next(model.parameters()).device
    head = torch.tensor([correct, reward_sum, len(examples), cut_off], dtype=torch.float64)
    return torch.cat([head, by_length.flatten()]).to(device)


def _scored(
    rewards: RewardSet,
    prompts: list[str],
    answers: list[str],
    decoded: RolloutBatch,
    completion_answer: Callable[[str], str] | None,
) -> tuple[list[float], float]:
    """Per row of `decoded` (one row per prompt, or `group_size` consecutive rows each): 1.0 when correct,
    and the rows' summed total reward (NaN when a reward was not finite)."""
    group = len(decoded.completions) // len(prompts)  # the batch's layout: a prompt's rows are consecutive
    prompts = [p for p in prompts for _ in range(group)]
    answers = [a for a in answers for _ in range(group)]
    matches, reward_sum = None, float("nan")
    try:
        total, raw = rewards(
            prompts, decoded.completions, answers, decoded.truncated, decoded.completion_lengths
        )
        reward_sum = float(total.sum())
        matches = _verdicts(rewards, raw)
    except NonFiniteRewardError:  # the accuracy still counts; the mean reward is NaN, as its inputs
        pass
    if matches is None:
        matches = _verdicts_alone(rewards, prompts, decoded.completions, answers, completion_answer)
    # An answer cut off at the budget is not correct, whatever its text (see RewardSet.truncated_max).
    hits = [m if not cut else 0.0 for m, cut in zip(matches, decoded.truncated.tolist(), strict=True)]
    return hits, reward_sum


@torch.no_grad()
def sampled_totals(
    model: nn.Module,
    tokenizer: Tokenizer,
    examples: list[Example],
    rewards: RewardSet,
    settings: ValSamplesConfig,
    *,
    max_new_tokens: int,
    batch_size: int,
    generator: torch.Generator,
    completion_answer: Callable[[str], str] | None = None,
    per_item: list[tuple[float, list[float]]] | None = None,
) -> torch.Tensor:
    """`[2 + len(ks)]` float64 on the model's device: the number of `examples`, the sum over them of the
    share of their `settings.n` samples (at `settings.temperature`) that are right, then for each k of
    `settings.ks` the sum of their pass@k. Sums, as `greedy_totals`; right as `greedy_totals` judges it.
    Draws only from `generator`, so the training's random streams are untouched. Restores the model's mode.
    `per_item`: when given, each example's (share right, [pass@k for each k]) is appended, in order."""
    n, ks = settings.n, settings.resolved_ks()
    check_ks(n, ks)
    was_training = model.training
    model.eval()
    options = SamplingOptions(max_new_tokens=max_new_tokens, group_size=n, temperature=settings.temperature)
    mean_sum, pass_sums = 0.0, np.zeros(len(ks))
    per_chunk = max(1, batch_size // n)  # about batch_size sequences decoded at once, as the greedy pass
    for start in range(0, len(examples), per_chunk):
        chunk = examples[start : start + per_chunk]
        prompts, answers = [e.prompt for e in chunk], [e.answer for e in chunk]
        decoded = generate(model, tokenizer, prompts, options, generator=generator)
        hits, _ = _scored(rewards, prompts, answers, decoded, completion_answer)
        correct = np.asarray(hits).reshape(len(chunk), n).sum(axis=1).round().astype(np.int64)
        mean_sum += float((correct / n).sum())
        pass_sums += [pass_at_k(correct, n, k).sum() for k in ks]
        if per_item is not None:
            by_k = [pass_at_k(correct, n, k) for k in ks]  # each [len(chunk)]
            per_item.extend((float(c / n), [float(p[i]) for p in by_k]) for i, c in enumerate(correct))
    model.train(was_training)
    device = next(model.parameters()).device
    return torch.tensor([len(examples), mean_sum, *pass_sums], dtype=torch.float64).to(device)


def sampled_metrics(totals: torch.Tensor, settings: ValSamplesConfig) -> dict[str, float]:
    """val/mean@n and val/pass@k for each k, from `sampled_totals` summed over every share of the set."""
    count, mean_sum, *pass_sums = totals.tolist()
    metrics = {M.VAL_MEAN_AT + str(settings.n): mean_sum / count}
    for k, total in zip(settings.resolved_ks(), pass_sums, strict=True):
        metrics[M.VAL_PASS_AT + str(k)] = total / count
    return metrics


def _verdicts(rewards: RewardSet, raw: dict[str, torch.Tensor]) -> list[float] | None:
    verdict = rewards.verdict()
    return None if verdict is None else [float(v == 1.0) for v in raw[verdict.name].tolist()]


def _verdicts_alone(
    rewards: RewardSet,
    prompts: list[str],
    completions: list[str],
    answers: list[str],
    completion_answer: Callable[[str], str] | None,
) -> list[float]:
    verdict = rewards.verdict()
    if verdict is None:
        scored = [completion_answer(c) for c in completions] if completion_answer else completions
        return exact_match(prompts, scored, answers)
    return [float(v == 1.0) for v in verdict.fn(prompts, completions, answers)]


def validation_metrics(totals: torch.Tensor, buckets: list[int] | None = None) -> dict[str, float]:
    """Accuracy, mean reward, share cut off and the accuracy per answer length in `buckets`, from
    `greedy_totals` (summed over every share of the held-out set)."""
    correct, reward_sum, count, cut_off = totals[:4].tolist()
    metrics = {M.VAL_ACCURACY: correct / count, M.VAL_REWARD_MEAN: reward_sum / count}
    metrics[M.VAL_CLIPPED_RATIO] = cut_off / count
    for length, (hits, n) in zip(buckets or [], totals[4:].view(-1, 2).tolist(), strict=True):
        metrics[M.VAL_ACCURACY_BY_LENGTH + str(length)] = hits / n if n else float("nan")
    return metrics


def startup_truncation_warning(metrics: dict[str, float], max_new_tokens: int) -> str | None:
    """Warn when most greedy answers of the validation before training (its `validation_metrics`) end at
    the budget: the task, prompt and budget do not fit, and the rollouts will show it as cut-off rewards
    (capped alike, so groups without a signal) long before anything else does. The warning or None."""
    share = metrics[M.VAL_CLIPPED_RATIO]
    if not share > TRUNCATED_MOST:
        return None
    message = (
        f"before training, {share:.0%} of the greedy answers to the held-out prompts stopped at "
        f"rollout.max_new_tokens={max_new_tokens} without EOS: the model's answers do not fit the budget, so "
        "the rewards will score unfinished text (or, with reward.truncated_max, give every cut-off "
        "completion the same capped reward). Raise rollout.max_new_tokens or ask the prompt for a shorter "
        "answer"
    )
    log.warning(message)
    return message
