"""What one rollout measured (rewards, advantages, lengths, stage timings), keyed as the trainer logs it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from twinkle_exp import metric_names as M
from twinkle_exp.advantages import AdvantageResult
from twinkle_exp.rollout import RolloutBatch


class StageTimer:
    """Wall-clock seconds of the named stages of one training step: `with timer(M.TIME_ROLLOUT): ...`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, key: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[key] = time.perf_counter() - start


def _std(values: torch.Tensor) -> torch.Tensor:
    return values.std() if values.numel() > 1 else torch.tensor(0.0)


def rollout_metrics(
    rollout: RolloutBatch,
    rewards: torch.Tensor,
    per_fn: dict[str, torch.Tensor],
    adv: AdvantageResult,
    timer: StageTimer,
    *,
    epochs: int,
) -> dict[str, float]:
    """Metrics of one rollout: `rewards` `[N]` total, `per_fn` `{name: [N]}` unweighted, `adv` its advantages.

    `epochs` (optim.mu) is how often the update went over the rollout's tokens, for the update's throughput.
    """
    tokens = float(rollout.completion_lengths.sum())
    t = timer.seconds
    metrics = {
        M.REWARD_MEAN: rewards.mean(),
        M.REWARD_STD: _std(rewards),
        M.FRAC_REWARD_ZERO_STD: adv.frac_zero_std,
        M.ADVANTAGE_MEAN: adv.advantages.mean(),
        M.ADVANTAGE_STD: _std(adv.advantages),
        M.ADVANTAGE_ABS_MEAN: adv.advantages.abs().mean(),
        M.COMPLETION_MEAN_LENGTH: rollout.completion_lengths.float().mean(),
        M.COMPLETION_CLIPPED_RATIO: rollout.truncated.float().mean(),
        **t,
        M.ROLLOUT_TOKENS_PER_S: tokens / max(t[M.TIME_ROLLOUT], 1e-9),
        M.UPDATE_TOKENS_PER_S: tokens * epochs / max(t[M.TIME_UPDATE], 1e-9),
        **{M.REWARD_PREFIX + name: values.mean() for name, values in per_fn.items()},
    }
    return {key: float(value) for key, value in metrics.items()}
