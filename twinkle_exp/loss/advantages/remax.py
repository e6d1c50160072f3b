"""ReMax (Li et al., arXiv 2310.10505): each prompt's baseline is the reward of its greedy completion,
A_i = r_i - r_greedy, no scaling. As verl's `remax` (verl/trainer/ppo/core_algos.py,
compute_remax_outcome_advantage; its trainer decodes the baseline with do_sample=False and scores it with the
same reward). The RL step draws that greedy completion per prompt only for this estimator
(`needs_greedy_baseline`), does not train on it, and logs its cost (`train/greedy_baseline/*`)."""

from __future__ import annotations

import torch

from .registry import AdvantageSettings, register


@register(
    "remax",
    source="ReMax (arXiv 2310.10505); verl remax",
    group_baseline=False,  # the baseline is not the group's: a group of equal rewards keeps r - r_greedy
    needs_greedy_baseline=True,
)
def remax(
    rewards: torch.Tensor, lengths: torch.Tensor, s: AdvantageSettings, greedy: torch.Tensor
) -> torch.Tensor:
    """rewards, lengths `[groups, G]` float64, greedy `[groups]` float64 -> `[groups, G]`."""
    return rewards - greedy[:, None]
