"""Entropy-shaped advantage (Cheng et al., arXiv 2506.14758, "Reasoning with Exploration: An Entropy
Perspective"): GRPO's group-relative advantage A, plus per token psi_t = min(alpha * H_t, |A| / kappa), with
H_t the policy's entropy at the token, detached (a shaping of the advantage, not an entropy gradient), and the
clip at |A| / kappa (kappa > 1) keeping the term from flipping or outweighing A. The per-sequence part is
group_relative at `advantage.scale`; the per-token part is added in the update (`registry.token_shaping`),
where the entropies exist. Parameters `advantage.entropy_alpha` and `advantage.entropy_kappa`."""

from __future__ import annotations

import torch

from .group_relative import SCALES, group_relative
from .registry import AdvantageSettings, register


def entropy_bonus(
    advantages: torch.Tensor, entropies: torch.Tensor, mask: torch.Tensor, s: AdvantageSettings
) -> torch.Tensor:
    """advantages `[B]` (one per sequence), entropies `[B, T]` detached, mask `[B, T]` bool -> `[B, T]`:
    A + min(alpha * H_t, |A| / kappa) on the mask, 0 off it."""
    adv = advantages[:, None].to(entropies.dtype)  # [B, 1]
    bonus = torch.minimum(s.entropy_alpha * entropies, adv.abs() / s.entropy_kappa)
    return (adv + bonus).masked_fill(~mask, 0.0)


register(
    "entropy_shaped",
    source="Entropy-based advantage shaping (arXiv 2506.14758), on GRPO's advantage",
    group_baseline=True,  # A = 0 on a group of equal rewards, so its clip |A| / kappa zeroes the term too
    scales=SCALES,
    reads=("entropy_alpha", "entropy_kappa"),
    token_shaping=entropy_bonus,
)(group_relative)
