"""Group-relative advantages: each completion's reward compared with the other completions of its prompt."""

from __future__ import annotations

from dataclasses import dataclass

import torch

SCALES = ("group", "batch", "none")


@dataclass
class AdvantageResult:
    advantages: torch.Tensor  # [N] float32, N = num_prompts * group_size
    frac_zero_std: float  # fraction of groups whose rewards are all equal (they carry no learning signal)
    num_zero_std_groups: int


def group_advantages(
    rewards: torch.Tensor, group_size: int, scale: str = "group", eps: float = 1e-6
) -> AdvantageResult:
    """A = r - mean(group), then divided per `scale`.

    rewards: `[N]`, groups contiguous: rewards[g*group_size:(g+1)*group_size] are one prompt's completions.
    scale: "group" divides by the group's std + eps (GRPO), "batch" by the std of all N rewards + eps,
    "none" leaves A unscaled (Dr.GRPO). Stds are the unbiased (sample, N-1) estimate, as torch.std and
    TRL use, so numbers line up with TRL's logs.

    A group whose rewards are all exactly equal gets advantage exactly 0 in every mode: r - mean could
    otherwise leave float round-off that eps-scaling blows up into noise. group_size 1 is allowed: every
    group is a zero-std group and every advantage is 0.
    """
    if scale not in SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}; valid: {', '.join(SCALES)}")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    n = rewards.numel()
    if n % group_size != 0:
        raise ValueError(f"number of rewards {n} is not divisible by group_size {group_size}")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards must be finite (got NaN or inf)")
    if n == 0:
        return AdvantageResult(
            advantages=rewards.new_zeros(0, dtype=torch.float32), frac_zero_std=0.0, num_zero_std_groups=0
        )

    # float64 for the statistics: rewards near 1e3 with float32 means lose the small differences.
    grouped = rewards.detach().to(torch.float64).reshape(-1, group_size)  # [num_groups, G]
    num_groups = grouped.shape[0]
    centered = grouped - grouped.mean(dim=1, keepdim=True)  # [num_groups, G]
    zero_std = grouped.amax(dim=1) == grouped.amin(dim=1)  # [num_groups] bool
    if scale == "group" and group_size > 1:
        centered = centered / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale == "batch" and n > 1:
        centered = centered / (grouped.std() + eps)
    centered[zero_std] = 0.0

    num_zero = int(zero_std.sum())
    return AdvantageResult(
        advantages=centered.reshape(-1).to(torch.float32),
        frac_zero_std=num_zero / num_groups,
        num_zero_std_groups=num_zero,
    )
