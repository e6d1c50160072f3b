"""The soft-gate family: a smooth gate on the ratio in place of a hard clip, so no token's gradient is cut to
zero at a boundary. SAPO. Notation as in `clipped`."""

from __future__ import annotations

import torch

from twinkle_exp.loss.base import PolicyGradientLoss
from twinkle_exp.loss.batch import TokenBatch
from twinkle_exp.loss.core import LossSpec
from twinkle_exp.loss.params import optional, param, positive
from twinkle_exp.loss.registry import register_loss

SAPO_GATE = "sapo/gate_mean"  # SAPO's gradient weight 4 s (1 - s), s = sigmoid(tau (r - 1)); 1 on-policy


@register_loss
class SAPOLoss(PolicyGradientLoss):
    """SAPO (Qwen, 2025): a smooth sigmoid gate instead of a hard clip; per-token loss -(4/tau) sigmoid(tau (r-1)) A.

    `tau` sets both temperatures; `tau_pos` (A > 0) and `tau_neg` (A <= 0) override one side each. The clip
    counts are PPO's (where a hard clip would bind), for comparison with the clipped losses.
    """

    name = "sapo"
    advantage_linear = True
    metric_keys = (SAPO_GATE,)

    tau: float = param(1.0, positive)
    tau_pos: float | None = param(None, optional(positive))  # None: tau
    tau_neg: float | None = param(None, optional(positive))  # None: tau

    def __post_init__(self) -> None:
        super().__post_init__()
        for side in ("tau_pos", "tau_neg"):
            if getattr(self, side) is None:
                object.__setattr__(self, side, self.tau)

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        tau = torch.where(b.advantages > 0, self.tau_pos, self.tau_neg).to(ratio.dtype)
        gate = torch.sigmoid(tau * (ratio - 1.0))
        # d/dlogp of (4/tau) sigmoid(tau (r - 1)) is 4 s (1 - s) r: the soft gate on the policy gradient.
        return -(4.0 / tau) * gate * b.advantages, {SAPO_GATE: 4.0 * gate * (1.0 - gate)}
