"""Positive and negative sample reinforcement (Zhu et al., arXiv 2506.01347), for 0/1 verifiable rewards, as
the authors' code (TianHongZXY/RLVR-Decomposed, verl/trainer/ppo/core_algos.py,
compute_psr_nsr_outcome_advantage): no baseline; a completion is correct when its reward is exactly 1 and
wrong when it is exactly 0.

- `psr`: A = 1 on correct completions, 0 elsewhere;
- `nsr`: A = -1 on wrong completions, 0 elsewhere;
- `w_reinforce`: A = lambda on correct ones (`advantage.positive_weight`, the paper's 0.1), -1 on wrong ones,
  and a partial reward r (neither 0 nor 1) keeps A = r, as the authors' code leaves it.

The authors drop the other completions from the batch for `psr` and `nsr`; here they stay with A = 0, which
changes a token-mean normaliser (GRPO's, DAPO's) by the share dropped, not a sum normaliser (Dr.GRPO's).
"""

from __future__ import annotations

import torch

from .registry import AdvantageSettings, register

_SOURCE = "PSR / NSR / W-REINFORCE (arXiv 2506.01347), as the authors' code"


@register("psr", source=_SOURCE, group_baseline=False)
def psr(rewards: torch.Tensor, lengths: torch.Tensor, s: AdvantageSettings) -> torch.Tensor:
    """rewards, lengths `[groups, G]` float64 -> `[groups, G]`."""
    return (rewards == 1).to(rewards.dtype)


@register("nsr", source=_SOURCE, group_baseline=False)
def nsr(rewards: torch.Tensor, lengths: torch.Tensor, s: AdvantageSettings) -> torch.Tensor:
    """rewards, lengths `[groups, G]` float64 -> `[groups, G]`."""
    return -(rewards == 0).to(rewards.dtype)


@register("w_reinforce", source=_SOURCE, group_baseline=False, reads=("positive_weight",))
def w_reinforce(rewards: torch.Tensor, lengths: torch.Tensor, s: AdvantageSettings) -> torch.Tensor:
    """rewards, lengths `[groups, G]` float64 -> `[groups, G]`."""
    return torch.where(rewards == 1, s.positive_weight * rewards, torch.where(rewards == 0, -1.0, rewards))
