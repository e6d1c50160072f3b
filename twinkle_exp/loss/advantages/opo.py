"""OPO (Hao et al., arXiv 2505.23585): the optimal baseline of an on-policy step is length-weighted,
b = sum_j L_j r_j / sum_j L_j over the group, A_i = r_i - b. As verl's `opo`. The paper's argument needs
strictly on-policy updates (`optim.mu=1`, `optim.num_minibatches=1`); off-policy it is only a baseline."""

from __future__ import annotations

import torch

from .registry import AdvantageSettings, register


@register("opo", source="OPO (arXiv 2505.23585); verl opo", group_baseline=True, min_group_size=2)
def opo(rewards: torch.Tensor, lengths: torch.Tensor, s: AdvantageSettings) -> torch.Tensor:
    """rewards, lengths `[groups, G]` float64 -> `[groups, G]`."""
    total = lengths.sum(dim=1, keepdim=True)
    baseline = (lengths * rewards).sum(dim=1, keepdim=True) / total.clamp_min(1.0)  # all-empty group: 0 / 1
    return rewards - baseline
