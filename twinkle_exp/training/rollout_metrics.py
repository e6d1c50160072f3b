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

    def gathered(self) -> RolloutRows:
        """Every data-parallel rank's rows, rank 0's first (one collective): the global batch, exactly as one
        process holding all of them would have it. Rows stay whole groups, so groups never mix."""
        names = sorted(self.per_fn)
        columns = [self.rewards, *(self.per_fn[n] for n in names), self.lengths, self.truncated]
        local = torch.stack([c.detach().to("cpu", torch.float64) for c in columns], dim=1)  # [N, 3 + fns]
        everyone = collectives.all_gather_rows(local)  # [ranks * N, 3 + fns]
        return RolloutRows(
            rewards=everyone[:, 0].to(self.rewards.dtype),
            per_fn={n: everyone[:, 1 + i].to(self.per_fn[n].dtype) for i, n in enumerate(names)},
            lengths=everyone[:, -2].long(),
            truncated=everyone[:, -1].bool(),
        )


# A completion is "correct" when its total reward reaches this: the verifiable term's full score (exact or
# math: 1 for a right answer). Shaping terms keep a wrong answer below it (partial credit <= 0.5, penalties
# <= 0, format 0.1), so on the built-in rewards this is the reward's verdict. The one definition of
# "correct" behind every metric split by correctness.
CORRECT_REWARD = 1.0


def is_correct(rewards: torch.Tensor) -> torch.Tensor:
    """`[N]` bool from `[N]` total rewards: the completions the reward judged right."""
    return rewards >= CORRECT_REWARD


def length_by_correctness(rows: RolloutRows) -> dict[str, float]:
    """Mean completion length of the correct and of the incorrect rows; a key is left out (not NaN, which
    the report counts as a fault) when the rollout has no row of its kind."""
    correct = is_correct(rows.rewards)
    lengths = rows.lengths.double()
    out = {}
    for key, rows_of_kind in (
        (M.COMPLETION_LENGTH_CORRECT, correct),
        (M.COMPLETION_LENGTH_INCORRECT, ~correct),
    ):
        if rows_of_kind.any():
            out[key] = float(lengths[rows_of_kind].mean())
    return out


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
    return {key: float(value) for key, value in metrics.items()} | length_by_correctness(rows)
