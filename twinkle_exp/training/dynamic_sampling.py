"""Dynamic sampling (DAPO, arXiv 2503.14476; `rollout.filter_zero_variance=true`): a group whose rewards are
all equal has a zero group-relative advantage and teaches nothing, so it is dropped and a fresh prompt's group
is drawn in its place, until every group of the rollout varies or `rollout.max_extra_draws` more sampling
passes are spent; then the rollout trains on what it has, its zero-variance groups left in (their advantages
are 0 under a group baseline) and `train/dynamic_sampling/cap_hit` set to 1.

A replacement takes the dropped group's place, so the rollout keeps its size and order. The fresh prompts
come from a stream of their own (`tasks.prompt_stream.FreshPrompts`), so the main stream, and a run with the
switch off, are what they always were. Every refill is sampled from the same weights as the rollout: no
optimizer step falls between them, so dynamic sampling adds no staleness. Under data parallelism each rank
refills its own groups, and every rank runs the same passes (the loop's decision is every rank's), drawing
one prompt's group it drops when it has none to replace, because scoring gathers over the ranks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch

from twinkle_exp import metric_names as M
from twinkle_exp.parallel import collectives
from twinkle_exp.sampling.generate import RolloutBatch
from twinkle_exp.sampling.rollout_groups import join, take_groups

log = logging.getLogger(__name__)
Batch = dict[str, list[str]]  # "prompts" and "answers", one per group


class Scored(Protocol):
    rewards: torch.Tensor  # [N] this rank's total reward per row
    per_fn: dict[str, torch.Tensor]  # {reward function: [N]}


def zero_variance(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """`[N]` rewards -> `[N / group_size]` bool: the groups whose rewards are all equal (a NaN one counts as
    not usable either: it cannot be trained on)."""
    grouped = rewards.detach().reshape(-1, group_size)
    return (grouped.amax(1) == grouped.amin(1)) | ~torch.isfinite(grouped).all(1)


class _Group(NamedTuple):
    prompt: str
    answer: str
    index: int  # the group's place in `draw`
    draw: RolloutBatch
    scores: Scored


@dataclass
class Refilled:
    batch: Batch  # the rollout's prompts and answers after the replacements
    rollout: RolloutBatch
    rewards: torch.Tensor  # [N] this rank's rows
    per_fn: dict[str, torch.Tensor]  # {reward function: [N]}
    metrics: dict[str, float]  # over every rank (train/dynamic_sampling/*)


def refill(
    batch: Batch,
    rollout: RolloutBatch,
    scores: Scored,
    *,
    draw: Callable[[list[str]], RolloutBatch],
    score: Callable[[Batch, RolloutBatch], Scored],
    fresh: Callable[[int], Batch],
    max_extra_draws: int,
    pad_id: int,
) -> Refilled:
    """Replace `rollout`'s zero-variance groups by fresh prompts' (`fresh(n)`: n prompts; `draw`: their
    groups; `score`: their rewards), at most `max_extra_draws` passes. Every rank calls it together."""
    g = rollout.group_size
    pairs = zip(batch["prompts"], batch["answers"], strict=True)
    parts = [_Group(p, a, i, rollout, scores) for i, (p, a) in enumerate(pairs)]
    slots = zero_variance(scores.rewards, g).nonzero().flatten().tolist()  # groups still to replace
    dropped, extra_rows, passes = len(slots), 0, 0
    while passes < max_extra_draws and collectives.any_rank(bool(slots)):
        more = fresh(max(len(slots), 1))
        drawn = draw(more["prompts"])
        got = score(more, drawn)
        usable = (~zero_variance(got.rewards, g)).tolist()
        for j, (p, a) in enumerate(zip(more["prompts"], more["answers"], strict=True)):
            if usable[j] and slots:
                parts[slots.pop(0)] = _Group(p, a, j, drawn, got)
        extra_rows += drawn.input_ids.shape[0]
        passes += 1
    totals = collectives.sum_over_ranks(
        {
            "groups": float(len(parts)),
            "dropped": float(dropped),
            "rows": float(extra_rows),
            "left": float(len(slots)),
        }
    )
    if totals["left"]:
        log.warning(
            "dynamic sampling: %d zero-variance groups left after rollout.max_extra_draws=%d passes; the "
            "rollout trains on them",
            totals["left"],
            max_extra_draws,
        )
    metrics = {
        M.DYNAMIC_DROPPED_FRACTION: totals["dropped"] / max(totals["groups"], 1.0),
        M.DYNAMIC_EXTRA_SAMPLES: totals["rows"],
        M.DYNAMIC_EXTRA_DRAWS: float(passes),
        M.DYNAMIC_ZERO_VARIANCE_LEFT: totals["left"],
        M.DYNAMIC_CAP_HIT: float(totals["left"] > 0),
    }
    return _assembled(parts, g, pad_id, metrics)


def _assembled(parts: list[_Group], g: int, pad_id: int, metrics: dict[str, float]) -> Refilled:
    rows = [torch.arange(x.index * g, (x.index + 1) * g) for x in parts]  # each group's rows in its draw
    names = sorted(parts[0].scores.per_fn)
    return Refilled(
        batch={"prompts": [x.prompt for x in parts], "answers": [x.answer for x in parts]},
        rollout=join([take_groups(x.draw, [x.index]) for x in parts], pad_id),
        rewards=torch.cat([x.scores.rewards[r] for x, r in zip(parts, rows, strict=True)]),
        per_fn={
            n: torch.cat([x.scores.per_fn[n][r] for x, r in zip(parts, rows, strict=True)]) for n in names
        },
        metrics=metrics,
    )
