"""The advantage estimators' registry: each estimator is one file that registers a function of one signature.

An estimator takes one optimizer step's rewards and completion lengths, grouped by prompt, in float64, and
returns one advantage per completion (`[num_groups, group_size]`); `estimate` checks the inputs, counts the
groups whose rewards are all equal, and returns float32 advantages in the rollout's order. Estimators see the
whole step's batch, gathered over data-parallel ranks before they run, so the batch-level ones (the
REINFORCE++ whitening) are rank-invariant by construction, and they run once per rollout, before the
micro-split, so they are micro-batch invariant too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

# (rewards [groups, G] float64, lengths [groups, G] float64, settings) -> advantages [groups, G] float64
EstimatorFn = Callable[[torch.Tensor, torch.Tensor, "AdvantageSettings"], torch.Tensor]


@dataclass(frozen=True)
class AdvantageSettings:
    """The `advantage` config's fields that estimators read (`config.schema.AdvantageConfig` has them all)."""

    scale: str = "group"  # group_relative, passk: divide by the group's std ("group"), the batch's, or not
    eps: float = 1e-6  # added to a std before dividing
    positive_weight: float = 0.1  # w_reinforce: lambda, the weight of the correct samples


@dataclass(frozen=True)
class Estimator:
    name: str
    fn: EstimatorFn
    source: str  # the paper, and the peers that ship it
    group_baseline: bool  # compares a completion with its group: a group of equal rewards gets exactly 0
    min_group_size: int = 1
    scales: tuple[str, ...] = ("group",)  # the `advantage.scale` values it accepts ("group": the default)
    reads: tuple[str, ...] = ()  # AdvantageSettings fields it reads besides `scale` and `eps`


ESTIMATORS: dict[str, Estimator] = {}


def register(name: str, **fields) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator: `@register("rloo", source=..., group_baseline=True, min_group_size=2)`."""

    def add(fn: EstimatorFn) -> EstimatorFn:
        if name in ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is registered twice")
        ESTIMATORS[name] = Estimator(name=name, fn=fn, **fields)
        return fn

    return add


@dataclass
class AdvantageResult:
    advantages: torch.Tensor  # [N] float32, N = num_prompts * group_size
    frac_zero_std: float  # fraction of groups whose rewards are all equal (they carry no learning signal)
    num_zero_std_groups: int


def check_inputs(rewards: torch.Tensor, group_size: int, eps: float) -> None:
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    if rewards.numel() % group_size != 0:
        raise ValueError(f"number of rewards {rewards.numel()} is not divisible by group_size {group_size}")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards must be finite (got NaN or inf)")


def estimate(
    name: str,
    rewards: torch.Tensor,
    group_size: int,
    lengths: torch.Tensor | None = None,
    settings: AdvantageSettings = AdvantageSettings(),
) -> AdvantageResult:
    """Advantages of estimator `name` for `rewards` `[N]` (groups contiguous: rewards[g*G:(g+1)*G] are one
    prompt's completions) and completion `lengths` `[N]` (tokens; needed by the length-weighted ones)."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; valid: {', '.join(sorted(ESTIMATORS))}")
    est = ESTIMATORS[name]
    check_inputs(rewards, group_size, settings.eps)
    if settings.scale not in est.scales:
        raise ValueError(
            f"advantage estimator {name} takes scale {' or '.join(est.scales)}, got {settings.scale!r}"
        )
    if group_size < est.min_group_size:
        raise ValueError(
            f"advantage estimator {name} needs group_size >= {est.min_group_size}, got {group_size}"
        )
    if rewards.numel() == 0:
        return AdvantageResult(rewards.new_zeros(0, dtype=torch.float32), 0.0, 0)
    if lengths is None:
        lengths = torch.ones_like(rewards)
    if lengths.shape != rewards.shape or not (lengths >= 0).all():
        raise ValueError(f"lengths must be [N] = {tuple(rewards.shape)} and >= 0, got {tuple(lengths.shape)}")
    # float64 for the statistics: rewards near 1e3 in float32 lose the small differences.
    grouped = rewards.detach().to(torch.float64).reshape(-1, group_size)  # [groups, G]
    lens = lengths.detach().to(torch.float64).reshape(-1, group_size)  # [groups, G]
    advantages = est.fn(grouped, lens, settings)  # [groups, G]
    zero_std = grouped.amax(dim=1) == grouped.amin(dim=1)  # [groups] bool
    if est.group_baseline:
        # r - mean can leave float round-off that a division would blow up into noise
        advantages = advantages.masked_fill(zero_std[:, None], 0.0)
    num_zero = int(zero_std.sum())
    return AdvantageResult(advantages.reshape(-1).to(torch.float32), num_zero / grouped.shape[0], num_zero)
