"""REINFORCE++ (Hu, arXiv 2501.03262), outcome rewards, gamma = 1: every token's return is the sequence's
reward, whitened over all completion tokens of the step's batch, so each completion weighs by its length:
mean = sum_i L_i r_i / sum_i L_i, var = sum_i L_i (r_i - mean)^2 / (sum_i L_i - 1), A_i = (r_i - mean) /
sqrt(var + 1e-8). `reinforce_pp_baseline` subtracts the group mean first, then whitens the same way. As verl's
`reinforce_plus_plus` and `reinforce_plus_plus_baseline` (verl_F.masked_whiten: token-weighted, unbiased,
1e-8 inside the square root); OpenRLHF ships both."""

from __future__ import annotations

import torch

from .registry import AdvantageSettings, register

WHITEN_EPS = 1e-8  # verl's masked_whiten: inside the square root, not `advantage.eps`


def token_whitened(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(values - token-weighted mean) / sqrt(token-weighted unbiased var + 1e-8); both `[groups, G]`."""
    tokens = lengths.sum()
    if tokens < 2:
        raise ValueError(
            f"REINFORCE++ whitening needs at least 2 completion tokens in the batch, got {int(tokens)}"
        )
    mean = (lengths * values).sum() / tokens
    var = (lengths * (values - mean) ** 2).sum() / (tokens - 1)
    return (values - mean) / torch.sqrt(var + WHITEN_EPS)


@register(
    "reinforce_pp",
    source="REINFORCE++ (arXiv 2501.03262); verl reinforce_plus_plus, OpenRLHF reinforce++",
    group_baseline=False,
)
def reinforce_pp(rewards: torch.Tensor, lengths: torch.Tensor, s: AdvantageSettings) -> torch.Tensor:
    """rewards, lengths `[groups, G]` float64 -> `[groups, G]`."""
    return token_whitened(rewards, lengths)


@register(
    "reinforce_pp_baseline",
    source="REINFORCE++-baseline (arXiv 2501.03262); verl reinforce_plus_plus_baseline, OpenRLHF",
    group_baseline=True,
)
def reinforce_pp_baseline(rewards: torch.Tensor, lengths: torch.Tensor, s: AdvantageSettings) -> torch.Tensor:
    """rewards, lengths `[groups, G]` float64 -> `[groups, G]`."""
    centered = rewards - rewards.mean(dim=1, keepdim=True) if rewards.shape[1] > 1 else rewards
    return token_whitened(centered, lengths)
