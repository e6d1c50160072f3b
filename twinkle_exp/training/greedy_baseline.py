"""ReMax's baseline (`advantage=remax`): one greedy completion per prompt from the sampler, scored with the
rollout's own reward and never trained on; drawn only for estimators with `needs_greedy_baseline`. It comes
from the policy that drew the rollout (with `rollout.staleness=k`, the lagged one): the baseline of a
sample is its own behaviour policy's greedy answer."""

from __future__ import annotations

import logging

import torch

from twinkle_exp.parallel import collectives
from twinkle_exp.parallel.sharding import gathered
from twinkle_exp.rewards import NonFiniteRewardError
from twinkle_exp.sampling.generate import Decoding, SamplingOptions, generate
from twinkle_exp.training.step_parts import StepParts

log = logging.getLogger(__name__)


def greedy_rewards(parts: StepParts, prompts: list[str], answers: list[str]) -> torch.Tensor:
    """`[prompts over every rank]` float64: each prompt's greedy completion's reward, every rank's prompts in
    rank order (as the rollout's rows are gathered); NaN throughout this rank's share when one is not finite.

    Greedy decoding draws no random numbers, so the rollout's sampler stream is the same with it or without.
    """
    parts.policy.eval()
    with gathered(parts.policy), parts.lagged.weights(parts.policy) as behaviour:
        greedy = generate(
            parts.sampler_copy(behaviour),
            parts.tokenizer,
            prompts,
            SamplingOptions(parts.rollout.max_new_tokens, greedy=True),
            decoding=Decoding.auto(parts.policy, parts.device, parts.rollout.cascade_attention),
        )
    try:
        rewards, _ = parts.rewards(
            prompts, greedy.completions, answers, greedy.truncated, greedy.completion_lengths
        )
    except NonFiniteRewardError as exc:
        log.warning("ReMax's greedy baseline: %s; the rollout's optimizer steps are skipped", exc)
        rewards = torch.full((len(prompts),), float("nan"))
    local = rewards.detach().to("cpu", torch.float64)[:, None]  # [prompts, 1]
    return collectives.all_gather_rows(local)[:, 0]
