"""The clipped-ratio family: a per-token ratio r = pi / pi_old whose step is bounded by a clip.

GRPO, BNPO, Dr.GRPO and DAPO share PPO's clipped objective and differ in aggregation and defaults; CISPO
clips a stop-gradient weight instead; Clip-Cov and KL-Cov pick tokens by the covariance of A and logp.
Notation: d = log pi - log pi_old (clamped, `core.log_ratio`), r = exp(d), A the advantage, lo / hi the
resolved `clip_range` / `clip_range_high`. Where a paper and a peer's code differ the paper is followed and
the peer's form, when it is a one-liner, is a parameter; the docstrings say which.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss import seq_ops
from twinkle_exp.loss.base import PolicyGradientLoss
from twinkle_exp.loss.batch import TokenBatch
from twinkle_exp.loss.core import LossSpec, log_ratio
from twinkle_exp.loss.params import (
    boolean,
    finite,
    fraction,
    non_negative,
    optional,
    param,
    positive,
    positive_int,
)
from twinkle_exp.loss.registry import loss_dataclass, register_loss

DUAL_CLIP = "clip_ratio/dual_mean"  # A < 0 tokens whose loss the dual clip bounded at -c A
CLIP_COV = "clip_cov/detached_fraction"  # tokens Clip-Cov picked and detached
KL_COV = "kl_cov/penalised_fraction"  # tokens KL-Cov picked and penalised


@loss_dataclass
class ClippedRatioLoss(PolicyGradientLoss):
    """PPO's clipped objective, -min(r A, clip(r, 1 - lo, 1 + hi) A), with the switches `delta` (INTELLECT-2's
    cap on the unclipped branch) and `clip_ratio_c` (dual clip). The base of the PPO-clipped losses."""

    takes_clip_switches: ClassVar[bool] = True
    advantage_linear: ClassVar[bool] = True

    @property
    def metric_keys(self) -> tuple[str, ...]:
        return (DUAL_CLIP,) if self.clip_ratio_c is not None else ()

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        adv = b.advantages
        clipped = ratio.clamp(1.0 - spec.clip_range, 1.0 + spec.clip_range_high)
        # INTELLECT-2's two-sided cap: the unclipped branch is bounded too, so A < 0 with r >> 1 stays finite.
        unclipped = ratio if self.delta is None else ratio.clamp(max=self.delta)
        loss = -torch.minimum(unclipped * adv, clipped * adv)
        if self.clip_ratio_c is None:
            return loss, {}
        # Dual clip (Ye et al., 2020): for A < 0 the loss is at most -c A, however far r has grown.
        bound = -self.clip_ratio_c * adv
        dual = (adv < 0) & (loss > bound)
        return torch.where(adv < 0, torch.minimum(loss, bound), loss), {DUAL_CLIP: dual}


@register_loss
class GRPOLoss(ClippedRatioLoss):
    """GRPO (Shao et al., 2024): PPO-clipped token ratios, mean over sequences of each sequence's token mean."""

    name = "grpo"


@register_loss
class BNPOLoss(ClippedRatioLoss):
    """BNPO: GRPO's clipped objective, token mean over the whole optimizer-step batch."""

    name = "bnpo"
    aggregation = "token_mean"


@register_loss
class DRGRPOLoss(ClippedRatioLoss):
    """Dr.GRPO (Liu et al., 2025): clipped objective, summed and divided by sequences x max_completion_length.

    `max_completion_length` should be the sampler's budget (its `loss=drgrpo` option says so); None uses the
    longest completion of each call, which is then not invariant to how a step is split into micro-batches.
    """

    name = "drgrpo"
    aggregation = "constant"
    config_defaults = {"max_completion_length": "${rollout.max_new_tokens}"}

    max_completion_length: int | None = param(None, optional(positive_int))


@register_loss
class DAPOLoss(ClippedRatioLoss):
    """DAPO (Yu et al., 2025, arXiv 2503.14476): clip-higher (0.2 / 0.28), token mean over the whole step.

    The loss side only; DAPO's dynamic sampling and overlong shaping belong to the sampler and the reward.
    """

    name = "dapo"
    aggregation = "token_mean"

    clip_range_high: float | None = param(0.28, optional(positive))


@register_loss
class CISPOLoss(PolicyGradientLoss):
    """CISPO (MiniMax-M1, 2025): REINFORCE with a stop-gradient weight capped at 1 + hi; token mean over the batch.

    -sg(min(r, 1 + hi)) A logp, so clipped tokens still get gradient; `weight_floor` is verl's form, the
    weight also clipped below at 1 - lo.
    """

    name = "cispo"
    advantage_linear = True
    aggregation = "token_mean"
    metric_keys = (K.CISPO_CLIP,)
    clip_sides = ("high",)

    weight_floor: bool = param(False, boolean)

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        cap = 1.0 + spec.clip_range_high
        floor = 1.0 - spec.clip_range if self.weight_floor else None
        weight = ratio.clamp(min=floor, max=cap).detach()
        capped = ratio > cap
        if floor is not None:
            capped = capped | (ratio < floor)
        return -weight * b.advantages * b.logps, {K.CISPO_CLIP: capped.to(ratio.dtype)}


def _covariance(b: TokenBatch) -> torch.Tensor:
    """`[B, T]` centred product (A - mean A)(logp - mean logp) over this call's completion tokens."""
    logp = b.logps.detach()
    adv = b.advantages.detach()
    cov = (adv - seq_ops.masked_mean(adv, b.mask)) * (logp - seq_ops.masked_mean(logp, b.mask))
    return cov.masked_fill(~b.mask, -math.inf)


@register_loss
class ClipCovLoss(PolicyGradientLoss):
    """Clip-Cov (Cui et al., 2025, arXiv 2505.22617): PPO clip, and the gradient of `clip_cov_ratio` x N
    tokens, drawn at random (torch's global RNG) among those the clip left alone whose centred covariance
    (A - mean A)(logp - mean logp) lies in (clip_cov_lb, clip_cov_ub), is detached. Token mean.

    The means and the draw are over the tokens of one call, as in verl (a micro-batch there too).
    """

    name = "clip_cov"
    aggregation = "token_mean"
    metric_keys = (CLIP_COV,)

    clip_cov_ratio: float = param(2e-4, fraction)
    clip_cov_lb: float = param(1.0, finite)
    clip_cov_ub: float = param(5.0, finite)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.clip_cov_lb >= self.clip_cov_ub:
            raise ValueError(
                f"clip_cov_lb ({self.clip_cov_lb:g}) must be < clip_cov_ub ({self.clip_cov_ub:g})"
            )

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        adv = b.advantages
        unclipped = -adv * ratio
        clipped = -adv * ratio.clamp(1.0 - spec.clip_range, 1.0 + spec.clip_range_high)
        loss = torch.maximum(unclipped, clipped)
        cov = _covariance(b)
        band = (cov > self.clip_cov_lb) & (cov < self.clip_cov_ub) & b.mask & ~(clipped > unclipped)
        # Row-major order is the sequences' order in padded and packed layouts alike, so one seed picks the same.
        candidates = band.reshape(-1).nonzero().flatten()
        count = max(int(self.clip_cov_ratio * b.num_tokens), 1)
        chosen = candidates[torch.randperm(candidates.numel(), device=candidates.device)[:count]]
        selected = torch.zeros_like(band).reshape(-1).index_fill(0, chosen, True).reshape(band.shape)
        return torch.where(selected, loss.detach(), loss), {CLIP_COV: selected}


@register_loss
class KLCovLoss(PolicyGradientLoss):
    """KL-Cov (Cui et al., 2025, arXiv 2505.22617): -A r on every token (no clip), plus kl_cov_coef |d| on the
    top `kl_cov_ratio` share of tokens by centred covariance. Token mean.

    The KL term is |log pi - log pi_old|, as in the authors' and verl's code. Selection is per call.
    """

    name = "kl_cov"
    aggregation = "token_mean"
    metric_keys = (KL_COV,)
    clip_sides = ()

    kl_cov_ratio: float = param(2e-4, fraction)
    kl_cov_coef: float = param(1.0, non_negative)

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        cov = _covariance(b).reshape(-1)
        count = min(max(int(b.num_tokens * self.kl_cov_ratio), 1), b.num_tokens)
        top = torch.topk(cov, count).indices
        selected = torch.zeros_like(b.mask).reshape(-1).index_fill(0, top, True).reshape(b.mask.shape)
        penalty = self.kl_cov_coef * log_ratio(b).abs()
        return -b.advantages * ratio + selected * penalty, {KL_COV: selected}
