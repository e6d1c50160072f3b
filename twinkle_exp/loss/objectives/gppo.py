"""GPPO (Su et al., 2025, Klear-Reasoner, arXiv 2508.07629): gradient-preserving clipping. A clipped token
keeps PPO's clipped value, but instead of no gradient it gets the bound's: (1 +- eps) sg(1/r) r, whose
value is the bound and whose gradient with respect to logp is the bound. Notation as in `clipped`.

The paper could not be read here beyond its abstract; the form follows the authors' code (Kwai-Klear
KlearReasoner, `compute_gppo_loss` in `verl/trainer/ppo/core_algos.py`).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from twinkle_exp.loss.base import PolicyGradientLoss
from twinkle_exp.loss.batch import TokenBatch
from twinkle_exp.loss.core import LossSpec
from twinkle_exp.loss.objectives.clipped import DUAL_CLIP
from twinkle_exp.loss.params import optional, param, positive
from twinkle_exp.loss.registry import register_loss


def gradient_preserving_clip(
    ratio: torch.Tensor, adv: torch.Tensor, lo: float, hi: float, beta_low: float, beta_high: float
) -> torch.Tensor:
    """`[B, T]` per-token loss: -r A inside PPO's region; -beta_low (1 - lo) sg(1/r) r A where r < 1 - lo
    with A < 0, -beta_high (1 + hi) sg(1/r) r A where r > 1 + hi with A > 0 (`ratio`, `adv` `[B, T]`)."""
    r = ratio.detach()
    # r / sg(r) is 1 in value and r's own gradient over r: a bound times it is the bound with the bound's slope.
    unit = ratio / r
    low = (r < 1.0 - lo) & (adv < 0)
    high = (r > 1.0 + hi) & (adv > 0)
    loss = torch.where(low, -beta_low * (1.0 - lo) * unit * adv, -ratio * adv)
    return torch.where(high, -beta_high * (1.0 + hi) * unit * adv, loss)


@register_loss
class GPPOLoss(PolicyGradientLoss):
    """GPPO: PPO's clip with the clipped tokens' gradient kept at the bound (`gradient_preserving_clip`,
    both coefficients 1), token mean. Defaults 0.2 / 0.28 as the authors' math script; `clip_ratio_c` is the
    dual clip for A < 0 (`min(l, -c A)`, their script sets 10); `delta` is refused.
    """

    name = "gppo"
    advantage_linear = True
    aggregation = "token_mean"
    takes_clip_switches: ClassVar[bool] = True

    clip_range_high: float | None = param(0.28, optional(positive))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.delta is not None:
            raise ValueError(f"delta caps PPO's unclipped branch; {self.name} does not take it")

    @property
    def metric_keys(self) -> tuple[str, ...]:
        return (DUAL_CLIP,) if self.clip_ratio_c is not None else ()

    def coefficients(self) -> tuple[float, float]:
        """(beta_low, beta_high): the gradient scales of the tokens clipped below (A < 0) and above (A > 0)."""
        return 1.0, 1.0

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        adv = b.advantages
        loss = gradient_preserving_clip(
            ratio, adv, spec.clip_range, spec.clip_range_high, *self.coefficients()
        )
        if self.clip_ratio_c is None:
            return loss, {}
        bound = -self.clip_ratio_c * adv
        dual = (adv < 0) & (loss > bound)
        return torch.where(dual, bound, loss), {DUAL_CLIP: dual}
