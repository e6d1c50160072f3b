"""The objective table: per-token policy losses, one function and one row each.

An objective maps `(spec, batch, ratio [B, T])` to a `[B, T]` per-token policy loss and a dict of `[B, T]`
per-token metrics (indicators or weights) that the pipeline reports as token means. Two keys are special:
`clip_ratio/low_mean` and `clip_ratio/high_mean`, given as bool `[B, T]`, replace the pipeline's PPO-style
clip counts for objectives whose trust region is not the ratio's (GMPO's log-space clip, DPPO's masks).
The six published losses are here; the zoo's objectives are in `objectives_zoo`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss import objectives_zoo as zoo

if TYPE_CHECKING:
    from twinkle_exp.loss.batch import TokenBatch
    from twinkle_exp.loss.core import LossSpec


def _clip(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    adv = b.advantages
    clipped = ratio.clamp(1.0 - spec.clip_low, 1.0 + spec.clip_high)
    # INTELLECT-2's two-sided cap: the unclipped branch is bounded too, so A < 0 with r >> 1 stays finite.
    unclipped = ratio if spec.delta is None else ratio.clamp(max=spec.delta)
    loss = -torch.minimum(unclipped * adv, clipped * adv)
    if spec.clip_ratio_c is None:
        return loss, {}
    # Dual clip (Ye et al., 2020): for A < 0 the loss is at most -c A, however far r has grown.
    bound = -spec.clip_ratio_c * adv
    dual = (adv < 0) & (loss > bound)
    return torch.where(adv < 0, torch.minimum(loss, bound), loss), {K.DUAL_CLIP: dual}


def _sapo(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    tau = torch.where(b.advantages > 0, spec.tau_pos, spec.tau_neg).to(ratio.dtype)
    gate = torch.sigmoid(tau * (ratio - 1.0))
    # d/dlogp of (4/tau) sigmoid(tau (r - 1)) is 4 s (1 - s) r: the soft gate on the policy gradient.
    return -(4.0 / tau) * gate * b.advantages, {K.SAPO_GATE: 4.0 * gate * (1.0 - gate)}


def _cispo(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    # A capped, stop-gradient importance weight on REINFORCE, so clipped tokens still get gradient.
    cap = 1.0 + spec.clip_high
    floor = 1.0 - spec.clip_low if spec.cispo_floor else None  # verl's form clips below as well
    weight = ratio.clamp(min=floor, max=cap).detach()
    capped = ratio > cap
    if floor is not None:
        capped = capped | (ratio < floor)
    return -weight * b.advantages * b.logps, {K.CISPO_CLIP: capped.to(ratio.dtype)}


@dataclass(frozen=True)
class Objective:
    """What the pipeline needs to know of a per-token objective."""

    # (spec, batch, ratio [B, T]) -> ([B, T] per-token policy loss, {metric key: [B, T] indicator or weight})
    per_token: Callable[[LossSpec, TokenBatch, torch.Tensor], tuple[torch.Tensor, dict]]
    metric_keys: tuple[str, ...]  # the keys of that dict, reported even for an empty batch
    lower_clip: bool  # whether r < 1 - lo with A < 0 is clipped (counted in clip_ratio/low_mean)
    upper_clip: bool = True  # whether r > 1 + hi with A > 0 is clipped (counted in clip_ratio/high_mean)


OBJECTIVES: dict[str, Objective] = {
    "clip": Objective(_clip, (), lower_clip=True),
    "sapo": Objective(_sapo, (K.SAPO_GATE,), lower_clip=True),
    "cispo": Objective(_cispo, (K.CISPO_CLIP,), lower_clip=False),
    # The zoo (objectives_zoo.py). GMPO and DPPO report their own clip counts, so the flags do not matter.
    "reinforce": Objective(zoo.reinforce, (), lower_clip=False, upper_clip=False),
    "gmpo": Objective(zoo.gmpo, (), lower_clip=True),
    "clip_cov": Objective(zoo.clip_cov, (K.CLIP_COV,), lower_clip=True),
    "kl_cov": Objective(zoo.kl_cov, (K.KL_COV,), lower_clip=False, upper_clip=False),
    "vespo": Objective(zoo.vespo, (K.VESPO_PHI,), lower_clip=False, upper_clip=False),
    "dppo_tv": Objective(zoo.dppo_tv, (), lower_clip=True),
    "dppo_kl": Objective(zoo.dppo_kl, (), lower_clip=True),
    "topr": Objective(zoo.topr, (K.TOPR_WEIGHT,), lower_clip=False, upper_clip=False),
    "kimi": Objective(zoo.kimi, (K.KIMI_PENALTY,), lower_clip=False, upper_clip=False),
}
