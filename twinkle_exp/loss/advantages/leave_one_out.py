"""RLOO (Ahmadian et al., arXiv 2402.14740): each completion's baseline is the mean of the other G - 1 rewards
of its group, A_i = r_i - mean_{j != i} r_j = G / (G - 1) (r_i - mean(group)). As TRL's RLOOTrainer and
verl's `rloo` (verl/trainer/ppo/core_algos.py, compute_rloo_outcome_advantage); OpenRLHF's `rloo` too."""

from __future__ import annotations

import torch

from .registry import AdvantageSettings, register


@register(
    "rloo",
    source="RLOO (arXiv 2402.14740); TRL RLOOTrainer, verl rloo, OpenRLHF rloo",
    group_baseline=True,
    min_group_size=2,
)
def rloo(rewards: torch.Tensor, lengths: torch.Tensor, s: AdvantageSettings) -> torch.Tensor:
    """rewards, lengths `[groups, G]` float64 -> `[groups, G]`."""
    size = rewards.shape[1]
    return (rewards - rewards.mean(dim=1, keepdim=True)) * (size / (size - 1))
