"""The advantage estimators' registry: each estimator is one file that registers a function of one signature.

An estimator takes one optimizer step's rewards and completion lengths, grouped by prompt, in float64, and
returns one advantage per completion (`[num_groups, group_size]`); `estimate` checks the inputs, counts the
groups whose rewards are all equal, and returns float32 advantages in the rollout's order. Estimators see the
whole step's batch, gathered over data-parallel ranks before they run, so the batch-level ones (the
REINFORCE++ whitening) are rank-invariant by construction, and they run once per rollout, before the
micro-split, so they are micro-batch invariant too.

Two estimators need more than the rewards, and say so on their `Estimator`:
- `needs_greedy_baseline` (ReMax): the RL step draws one greedy completion per prompt, scores it, and passes
  its rewards (`[groups]`) to the estimator as `greedy=`; those completions are not trained on.
- `token_shaping` (the entropy-shaped advantage): a per-token term on top of the per-sequence advantage, from
  the policy's entropy at each token, which exists only in the update's forward pass. The update step calls
  it on each micro-batch before the loss, which then receives `[B, T]` advantages and stays a pure function
  of its tensors. A token's term reads only its own entropy and its own sequence's advantage, so it is
  micro-batch and rank invariant by construction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from twinkle_exp import plugins

# (rewards [groups, G] float64, lengths [groups, G] float64, settings) -> advantages [groups, G] float64;
# an estimator with needs_greedy_baseline also gets greedy= [groups] float64.
EstimatorFn = Callable[..., torch.Tensor]
# (advantages [B] one per sequence, entropies [B, T] detached, mask [B, T] bool, settings) -> [B, T]
TokenShapingFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "AdvantageSettings"], torch.Tensor]


@dataclass(frozen=True)
class AdvantageSettings:
    """The `advantage` config's fields that estimators read (`config.schema.AdvantageConfig` has them all)."""

    scale: str = "group"  # group_relative, passk: divide by the group's std ("group"), the batch's, or not
    eps: float = 1e-6  # added to a std before dividing
    positive_weight: float = 0.1  # w_reinforce: lambda, the weight of the correct samples
    entropy_alpha: float = 0.4  # entropy_shaped: alpha, the entropy's coefficient
    entropy_kappa: float = 2.0  # entropy_shaped: kappa, the term is at most |A| / kappa


@dataclass(frozen=True)
class Estimator:
    name: str
    fn: EstimatorFn
    source: str  # the paper, and the peers that ship it
    group_baseline: bool  # compares a completion with its group: a group of equal rewards gets exactly 0
    min_group_size: int = 1
    scales: tuple[str, ...] = ("group",)  # the `advantage.scale` values it accepts ("group": the default)
    reads: tuple[str, ...] = ()  # AdvantageSettings fields it reads besides `scale` and `eps`
    needs_greedy_baseline: bool = False  # gets greedy= [groups], the reward of a greedy completion per prompt
    token_shaping: TokenShapingFn | None = None  # a per-token term added in the update (see the module doc)


ESTIMATORS: dict[
    str, Estimator
] = {}  # name -> estimator; the built-in ones from import, the user's: estimators()


def estimators() -> dict[str, Estimator]:
    """The registry, with the built-in estimator modules and the user's plug-in modules (`TWINKLE_EXP_PLUGINS`)
    imported."""
    plugins.load(__name__.rpartition(".")[0])
    return ESTIMATORS


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
    greedy_rewards: torch.Tensor | None = None,
) -> AdvantageResult:
    """Advantages of estimator `name` for `rewards` `[N]` (groups contiguous: rewards[g*G:(g+1)*G] are one
    prompt's completions) and completion `lengths` `[N]` (tokens; needed by the length-weighted ones).
    `greedy_rewards` `[N / group_size]`: each prompt's greedy completion's reward, for the estimators with
    `needs_greedy_baseline` (and refused by the others, so that it is never drawn for nothing)."""
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
    if (greedy_rewards is not None) != est.needs_greedy_baseline:
        need = "needs" if est.needs_greedy_baseline else "does not take"
        raise ValueError(
            f"advantage estimator {name} {need} greedy_rewards (one greedy completion per prompt)"
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
    extra = (
        {"greedy": _greedy_column(name, greedy_rewards, grouped.shape[0])}
        if greedy_rewards is not None
        else {}
    )
    advantages = est.fn(grouped, lens, settings, **extra)  # [groups, G]
    zero_std = grouped.amax(dim=1) == grouped.amin(dim=1)  # [groups] bool
    if est.group_baseline:
        # r - mean can leave float round-off that a division would blow up into noise
        advantages = advantages.masked_fill(zero_std[:, None], 0.0)
    num_zero = int(zero_std.sum())
    return AdvantageResult(advantages.reshape(-1).to(torch.float32), num_zero / grouped.shape[0], num_zero)


def _greedy_column(name: str, greedy_rewards: torch.Tensor, groups: int) -> torch.Tensor:
    """`[groups]` float64 greedy rewards, checked."""
    if greedy_rewards.shape != (groups,):
        raise ValueError(
            f"advantage estimator {name}: greedy_rewards must be [groups] = ({groups},), one per prompt, "
            f"got {tuple(greedy_rewards.shape)}"
        )
    if not torch.isfinite(greedy_rewards).all():
        raise ValueError(f"advantage estimator {name}: greedy_rewards must be finite (got NaN or inf)")
    return greedy_rewards.detach().to(torch.float64)


def token_shaping(
    name: str, settings: AdvantageSettings
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None:
    """The update's per-token advantages of estimator `name`, or None when it has no per-token term:
    `(advantages [B], entropies [B, T], mask [B, T] bool) -> [B, T]`, the entropies detached first."""
    shaping = ESTIMATORS[name].token_shaping
    if shaping is None:
        return None
    return lambda adv, entropies, mask: shaping(adv, entropies.detach(), mask, settings)
