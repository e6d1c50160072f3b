"""M2PO (Zheng et al., 2025, arXiv 2510.01161), as AReaL implements it for stale data: the tokens of the
largest second moment d^2 are masked until the mean d^2 of those left is under `m2_threshold`; the rest
train on the unclipped -r A. Notation as in `clipped`.

The paper could not be read here beyond its abstract; the masking follows AReaL (`_apply_m2po_masking` in
`areal/trainer/ppo/actor.py`, `actor.m2_threshold`) and the objective AReaL's M2PO page.
"""

from __future__ import annotations

import torch

from twinkle_exp.loss.base import PolicyGradientLoss
from twinkle_exp.loss.batch import TokenBatch
from twinkle_exp.loss.core import LossSpec, log_ratio
from twinkle_exp.loss.params import param, positive
from twinkle_exp.loss.registry import register_loss

M2PO_MASKED = "m2po/masked_fraction"  # tokens the second-moment mask dropped
M2PO_M2 = "m2po/second_moment"  # token mean of d^2 = (log pi - log pi_old)^2 before masking


def second_moment_mask(m2: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """`[B, T]` bool, True = dropped: the fewest tokens of largest `m2` whose removal leaves the mean `m2` of
    the rest below `threshold` (all but the smallest when no such set exists). `m2`, `mask` `[B, T]`."""
    values = m2[mask]
    order = torch.sort(values, descending=True, stable=True).indices
    ranked = values[order]
    # The mean of the k smallest (the suffix of the descending order) for every k, from the end.
    suffix_means = ranked.flip(0).cumsum(0).flip(0) / torch.arange(
        ranked.numel(), 0, -1, dtype=ranked.dtype, device=ranked.device
    )
    below = (suffix_means < threshold).nonzero()
    count = int(below[0]) if below.numel() else ranked.numel() - 1
    dropped_sorted = torch.arange(ranked.numel(), device=m2.device) < count
    dropped = torch.zeros_like(values, dtype=torch.bool).scatter(0, order, dropped_sorted)
    out = torch.zeros_like(mask)
    out[mask] = dropped
    return out


@register_loss
class M2POLoss(PolicyGradientLoss):
    """M2PO: -M r A, token mean, M the second-moment mask of d = log pi - log pi_old over this call's tokens
    (`second_moment_mask`, tau_M2 = `m2_threshold`, 0.04 as the paper's and AReaL's). No ratio clip;
    `clip_range` is unused.

    AReaL measures d between the behaviour policy's log-probs and its proximal policy's (recomputed at the
    step's start) and puts the mask under its PPO loss; here d is log pi - log pi_old, pi_old the behaviour
    policy, as the M2 = mean (log pi_theta / pi_behav)^2 of AReaL's M2PO page, under -r A.
    """

    name = "m2po"
    aggregation = "token_mean"
    metric_keys = (M2PO_MASKED, M2PO_M2)
    clip_sides = ()

    m2_threshold: float = param(0.04, positive)

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        m2 = log_ratio(b).detach().square()
        dropped = second_moment_mask(m2, b.mask, self.m2_threshold)
        return -ratio * b.advantages * ~dropped, {M2PO_MASKED: dropped, M2PO_M2: m2}
