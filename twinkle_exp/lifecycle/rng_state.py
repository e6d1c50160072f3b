"""Every random state a training step draws from, captured and restored, one entry per data-parallel rank.

The module's own generators (the sampler's and the shuffler's) and the process-wide ones (torch, CUDA,
Python, NumPy: dropout and any user code draw from those) all go into a checkpoint. Each rank draws its own
numbers, so every rank's states are gathered to the rank that writes the file, and each takes its own back.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist


def capture_global() -> dict[str, Any]:
    """The process-wide random states, as plain containers and CPU tensors."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        # NumPy's state as a tensor and numbers, so the file needs no pickled NumPy array to load.
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_global(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def gather_per_rank(local: Any) -> list[Any]:
    """`[rank 0's, rank 1's, ...]` on every rank (a one-element list in a single process).

    A collective: under DDP every rank must call it at the same point (checkpoints are written by all
    ranks together, so the module's checkpoint hook is such a point).
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [local]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, local)
    return gathered


def own_rank_state(per_rank: list[Any], rank: int, world_size: int, source: str) -> Any:
    """This rank's entry of a checkpoint's per-rank list; a different number of ranks cannot resume exactly."""
    if len(per_rank) != world_size:
        raise ValueError(
            f"{source} was written by {len(per_rank)} process(es) and this run has {world_size}: resume on "
            "as many processes (trainer.devices), or start a new run"
        )
    return per_rank[rank]
