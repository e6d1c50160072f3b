"""What one rollout measured (rewards, advantages, lengths, stage timings), keyed as the trainer logs it."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from twinkle_exp import metric_names as M
from twinkle_exp.loss.advantages import AdvantageResult
from twinkle_exp.parallel import collectives

log = logging.getLogger(__name__)
TRUNCATED_MOST = 0.5  # a rollout with more than this share of completions cut off at the budget is warned of


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
    if rows.filtered_mass is not None:
        metrics[M.SAMPLER_FILTERED_MASS] = rows.filtered_mass.sum() / max(tokens, 1.0)
    return {key: float(value) for key, value in metrics.items()} | length_by_correctness(rows)


class TruncationWatch:
    """Says plainly when most completions of a rollout end at `rollout.max_new_tokens` without EOS.

    Otherwise that shows only as groups with identical rewards (every cut-off completion capped at
    `reward.truncated_max`), or, with no cap, as a reward that may come from text the model repeats rather
    than from an answer. Warns at the first such rollout and at every `every`-th one after, naming the
    optimizer steps where it happened.
    """

    def __init__(self, max_new_tokens: int, truncated_max: float | None, every: int = 10):
        self.max_new_tokens, self.truncated_max, self.every = max_new_tokens, truncated_max, every
        self.steps: list[int] = []  # optimizer steps whose rollout was mostly cut off

    def observe(self, clipped_ratio: float, step: int) -> str | None:
        """Record one rollout's share of cut-off completions (after optimizer step `step`); the warning or None."""
        if not clipped_ratio > TRUNCATED_MOST:
            return None
        self.steps.append(step)
        if (len(self.steps) - 1) % self.every:
            return None
        if self.truncated_max is None:
            effect = (
                "they are scored as they stand (reward.truncated_max=null), so a rising reward may come from "
                "text the model repeats rather than from an answer"
            )
        else:
            effect = f"their reward is capped at reward.truncated_max={self.truncated_max:g}"
        message = (
            f"{clipped_ratio:.0%} of the completions of the rollout ending at optimizer step {step} stopped at "
            f"rollout.max_new_tokens={self.max_new_tokens} without EOS (most were, in {len(self.steps)} "
            f"rollout(s): steps {_some_steps(self.steps)}); {effect}. Raise rollout.max_new_tokens or ask "
            f"the prompt for a shorter answer"
        )
        log.warning(message)
        return message


def _some_steps(steps: list[int], head: int = 5) -> str:
    """The first `head` steps and the latest: "0, 4, 8, 12, 16, ..., 40"."""
    shown = [str(x) for x in steps[:head]]
    if len(steps) > head:
        shown += ["...", str(steps[-1])] if len(steps) > head + 1 else [str(steps[-1])]
    return ", ".join(shown)
