"""Group-relative advantages (GRPO, DeepSeekMath arXiv 2402.03300; Dr.GRPO arXiv 2503.20783 unscaled):
A = r - mean(group), divided by the group's std ("group", GRPO), the whole batch's ("batch"), or not ("none").

Stds are the unbiased (sample, N-1) estimate, as torch.std and TRL use, so numbers line up with TRL's logs.
`advantage=group`, `batch` and `unscaled` are this estimator at the three scales.
"""

from __future__ import annotations

import torch

from .registry import AdvantageResult, AdvantageSettings, estimate, register

SCALES = ("group", "batch", "none")


@register(
    "group_relative",
    source="GRPO (arXiv 2402.03300), as TRL's GRPOTrainer and verl's grpo; scale=none: Dr.GRPO (arXiv 2503.20783)",
    group_baseline=True,
    scales=SCALES,
)
def group_relative(rewards: torch.Tensor, lengths: torch.Tensor, s: AdvantageSettings) -> torch.Tensor:
    """rewards, lengths `[groups, G]` float64 -> `[groups, G]`."""
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    size = rewards.shape[1]
    if s.scale == "group" and size > 1:
        centered = centered / (rewards.std(dim=1, keepdim=True) + s.eps)
    elif s.scale == "batch" and rewards.numel() > 1:
        centered = centered / (rewards.std() + s.eps)
    return centered


def group_advantages(
    rewards: torch.Tensor, group_size: int, scale: str = "group", eps: float = 1e-6
) -> AdvantageResult:
    """A = r - mean(group), then divided per `scale`; rewards `[N]`, groups contiguous.

    A group whose rewards are all exactly equal gets advantage exactly 0 in every mode. group_size 1 is
    allowed: every group is a zero-std group and every advantage is 0.
    """
    if scale not in SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}; valid: {', '.join(SCALES)}")
    return estimate("group_relative", rewards, group_size, settings=AdvantageSettings(scale=scale, eps=eps))
