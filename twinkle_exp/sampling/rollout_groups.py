"""Whole groups of a `RolloutBatch` taken out, and rollouts joined, keeping the batch's layout: every row's
prompt left-padded to one width, its completion right-padded after it (dynamic sampling's refills)."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from twinkle_exp.logprobs import IGNORE_INDEX
from twinkle_exp.sampling.generate import RolloutBatch

_SAMPLED_WITH = ("group_size", "temperature", "top_k", "top_p")


def prompt_width(rollout: RolloutBatch) -> int:
    """P: the first column that any row labels (every row labels at least its first completion token)."""
    return int((rollout.labels != IGNORE_INDEX).any(0).long().argmax())


def take_groups(rollout: RolloutBatch, groups: list[int]) -> RolloutBatch:
    """The rows of `groups` (indices of prompts in `rollout`), in that order, renumbered 0.. (widths kept)."""
    g = rollout.group_size
    rows = torch.tensor([i * g + j for i in groups for j in range(g)], dtype=torch.long)
    on = rows.to(rollout.input_ids.device)
    picked = rows.tolist()
    return dataclasses.replace(
        rollout,
        input_ids=rollout.input_ids[on],
        attention_mask=rollout.attention_mask[on],
        position_ids=rollout.position_ids[on],
        labels=rollout.labels[on],
        old_logps=rollout.old_logps[on],
        completion_ids=[rollout.completion_ids[r] for r in picked],
        completions=[rollout.completions[r] for r in picked],
        truncated=rollout.truncated[rows.to(rollout.truncated.device)],
        prompt_index=torch.arange(len(groups), device=rollout.prompt_index.device).repeat_interleave(g),
        filtered_mass=None if rollout.filtered_mass is None else rollout.filtered_mass[on],
    )


def join(rollouts: list[RolloutBatch], pad_id: int) -> RolloutBatch:
    """One rollout of `rollouts`' groups in order; each part's prompts left-padded and its completions
    right-padded (with `pad_id`, attention 0, position 0, label -100, log-prob 0) to the widest part's."""
    if not rollouts:
        raise ValueError("join needs at least one rollout")
    first = rollouts[0]
    for r in rollouts[1:]:
        if any(getattr(r, k) != getattr(first, k) for k in _SAMPLED_WITH):
            raise ValueError(f"join: rollouts drawn with different {', '.join(_SAMPLED_WITH)} do not mix")
    if len({r.filtered_mass is None for r in rollouts}) > 1:
        raise ValueError("join: rollouts with and without a top-k / top-p filter do not mix")
    widths = [(prompt_width(r), r.input_ids.shape[1] - prompt_width(r)) for r in rollouts]
    p_max, c_max = max(p for p, _ in widths), max(c for _, c in widths)

    def padded(name: str, value: float) -> torch.Tensor:
        return torch.cat(
            [
                F.pad(getattr(r, name), (p_max - p, c_max - c), value=value)
                for r, (p, c) in zip(rollouts, widths, strict=True)
            ]
        )

    groups = sum(r.input_ids.shape[0] for r in rollouts) // first.group_size
    return dataclasses.replace(
        first,
        input_ids=padded("input_ids", pad_id),
        attention_mask=padded("attention_mask", 0),
        position_ids=padded("position_ids", 0),
        labels=padded("labels", IGNORE_INDEX),
        old_logps=padded("old_logps", 0.0),
        completion_ids=[ids for r in rollouts for ids in r.completion_ids],
        completions=[text for r in rollouts for text in r.completions],
        truncated=torch.cat([r.truncated for r in rollouts]),
        prompt_index=torch.arange(groups, device=first.prompt_index.device).repeat_interleave(
            first.group_size
        ),
        filtered_mass=None if first.filtered_mass is None else torch.cat([r.filtered_mass for r in rollouts]),
    )
