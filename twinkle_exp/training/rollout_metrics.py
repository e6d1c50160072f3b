"""What one rollout measured (rewards, advantages, lengths, stage timings), keyed as the trainer logs it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from twinkle_exp import metric_names as M
from twinkle_exp.loss.advantages import AdvantageResult
from twinkle_exp.parallel import collectives


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


@dataclass
class RolloutRows:
    """The per-row figures of one rollout that its metrics and advantages are computed from."""

    rewards: torch.Tensor  # [N] total (weighted) reward per row
    per_fn: dict[str, torch.Tensor]  # {reward function name: [N] unweighted reward}
    lengths: torch.Tensor  # [N] completion tokens per row, EOS included
    truncated: torch.Tensor  # [N] bool, max_new_tokens reached without EOS
    filtered_mass: torch.Tensor | None = None  # [N] top-k/top-p's removed mass summed over the row's tokens

    def gathered(self) -> RolloutRows:
        """Every data-parallel rank's rows, rank 0's first (one collective): the global batch, exactly as one
        process holding all of them would have it. Rows stay whole groups, so groups never mix."""
        names = sorted(self.per_fn)
        filtered = [] if self.filtered_mass is None else [self.filtered_mass]  # the same on every rank
        columns = [self.rewards, *(self.per_fn[n] for n in names), self.lengths, self.truncated, *filtered]
        local = torch.stack([c.detach().to("cpu", torch.float64) for c in columns], dim=1)  # [N, 3 + fns]
        everyone = collectives.all_gather_rows(local)  # [ranks * N, 3 + fns (+ 1)]
        last = everyone.shape[1] - len(filtered)
        return RolloutRows(
            rewards=everyone[:, 0].to(self.rewards.dtype),
            per_fn={n: everyone[:, 1 + i].to(self.per_fn[n].dtype) for i, n in enumerate(names)},
            lengths=everyone[:, last - 2].long(),
            truncated=everyone[:, last - 1].bool(),
            filtered_mass=everyone[:, last] if filtered else None,
        )


def _std(values: torch.Tensor) -> torch.Tensor:
    return values.std() if values.numel() > 1 else torch.tensor(0.0)


def rollout_metrics(
    rows: RolloutRows, adv: AdvantageResult, seconds: dict[str, float], *, epochs: int
) -> dict[str, float]:
    """Metrics of one rollout from its `rows`, their advantages `adv` (`[N]`) and the stages' wall `seconds`.

    `epochs` (optim.mu) is how often the update went over the rollout's tokens, for the update's throughput.
    """
    tokens = float(rows.lengths.sum())
    t = seconds
    metrics = {
        M.REWARD_MEAN: rows.rewards.mean(),
        M.REWARD_STD: _std(rows.rewards),
        M.FRAC_REWARD_ZERO_STD: adv.frac_zero_std,
        M.ADVANTAGE_MEAN: adv.advantages.mean(),
        M.ADVANTAGE_STD: _std(adv.advantages),
        M.ADVANTAGE_ABS_MEAN: adv.advantages.abs().mean(),
        M.COMPLETION_MEAN_LENGTH: rows.lengths.float().mean(),
        M.COMPLETION_CLIPPED_RATIO: rows.truncated.float().mean(),
        **t,
        M.ROLLOUT_TOKENS_PER_S: tokens / max(t[M.TIME_ROLLOUT], 1e-9),
        M.UPDATE_TOKENS_PER_S: tokens * epochs / max(t[M.TIME_UPDATE], 1e-9),
        **{M.REWARD_PREFIX + name: values.mean() for name, values in rows.per_fn.items()},
    }
    if rows.filtered_mass is not None:
        metrics[M.SAMPLER_FILTERED_MASS] = rows.filtered_mass.sum() / max(tokens, 1.0)
    return {key: float(value) for key, value in metrics.items()}
