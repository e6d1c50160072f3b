"""Pass@k advantages (verl `grpo_passk`, after arXiv 2503.19595; Pass@k Training, arXiv 2508.10751): only the
best completion of each group gets an advantage, r_max - r_second_max, divided by the group's std + eps when
`advantage.scale=group` (verl's norm_adv_by_std_in_grpo, its default), raw with `scale=none`; the rest 0.
Ties at the top give 0 whichever completion is taken as the best."""

from __future__ import annotations

import torch

from .registry import AdvantageSettings, register


@register(
    "passk",
    source="verl grpo_passk (arXiv 2503.19595); Pass@k Training (arXiv 2508.10751)",
    group_baseline=True,
    min_group_size=2,
    scales=("group", "none"),
)
def passk(rewards: torch.Tensor, lengths: torch.Tensor, s: AdvantageSettings) -> torch.Tensor:
    """rewards, lengths `[groups, G]` float64 -> `[groups, G]`."""
    top, best = rewards.topk(2, dim=1)  # [groups, 2] values and their positions
    gap = top[:, 0] - top[:, 1]  # [groups]
    if s.scale == "group":
        gap = gap / (rewards.std(dim=1) + s.eps)
    return torch.zeros_like(rewards).scatter(1, best[:, :1], gap[:, None])
