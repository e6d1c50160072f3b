"""Data-parallel collectives the training step needs, each an identity in a single process.

Every rank holds whole groups of the same number of rows, so per-row figures are gathered with one
`all_gather` of equal shapes, and concatenating them in rank order gives the global batch exactly as one
process holding every rank's rows would see it. Sums, minima and maxima are packed into one tensor per
reduction, so a step costs a handful of collectives however many metrics it logs.

Every rank must make the same calls in the same order. Inputs may live anywhere: they travel on the device
the backend needs (CPU for gloo, the current GPU for NCCL) and come back on their own device.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)
_OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    """Data-parallel ranks (the whole world: tensor parallelism is not used)."""
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def _comm_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce(values: torch.Tensor, op: str) -> torch.Tensor:
    """`values` (any shape) reduced elementwise over ranks with "sum", "min" or "max"; a new tensor."""
    if not is_distributed():
        return values.clone()
    out = values.to(_comm_device(), copy=True)
    dist.all_reduce(out, op=_OPS[op])
    return out.to(values.device)


def all_gather_rows(rows: torch.Tensor) -> torch.Tensor:
    """`[N, ...]` with the same shape on every rank -> `[world_size * N, ...]`, rank 0's rows first."""
    if not is_distributed():
        return rows.clone()
    local = rows.to(_comm_device()).contiguous()
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local)
    return torch.cat(parts).to(rows.device)


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's `obj` (picklable), in rank order."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def any_rank(flag: bool) -> bool:
    """Whether `flag` is True on any rank: one vote, so that every rank takes the same decision."""
    if not is_distributed():
        return flag
    return bool(all_reduce(torch.tensor([flag], dtype=torch.int32), "max").item())


def _reduce_dict(values: dict[str, float], op: str) -> dict[str, float]:
    keys = sorted(values)  # the same order on every rank
    reduced = all_reduce(torch.tensor([values[k] for k in keys], dtype=torch.float64), op)
    return dict(zip(keys, reduced.tolist(), strict=True))


def max_over_ranks(values: dict[str, float]) -> dict[str, float]:
    """Per-key maximum over ranks of a dict that has the same keys on every rank (e.g. stage timings)."""
    return _reduce_dict(values, "max")


def sum_over_ranks(values: dict[str, float]) -> dict[str, float]:
    """Per-key sum over ranks of a dict that has the same keys on every rank (e.g. counts)."""
    return _reduce_dict(values, "sum")


def step_totals(num_sequences: int, num_tokens: int, device: torch.device) -> tuple[int, int]:
    """The optimizer step's sequences and completion tokens summed over ranks: the losses' normalisers."""
    local = torch.tensor([num_sequences, num_tokens], dtype=torch.int64, device=device)
    seqs, tokens = all_reduce(local, "sum").tolist()
    return int(seqs), int(tokens)


def shard(items: list[Any]) -> list[Any]:
    """This rank's share of `items`: every world_size-th item from its rank on, so each item goes to one rank."""
    return items[rank() :: world_size()]


def full_value(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor from a DTensor result (FSDP2's gradient norm is a replicated DTensor)."""
    full_tensor = getattr(t, "full_tensor", None)
    return full_tensor() if callable(full_tensor) else t


def wait_for_file(
    path: Path, timeout_s: float, what: str, poll_s: float = 1.0, stop: Callable[[], Any] | None = None
) -> None:
    """Block until `path` exists (written by rank 0, atomically), or raise after `timeout_s` seconds;
    return early once `stop()` is not None (a signal asked the run to stop).

    Used before any process group exists (the warm-start runs before Lightning sets one up), so it polls the
    file system rather than waiting at a barrier.
    """
    start = time.monotonic()
    logged = False
    while not path.exists() and (stop is None or stop() is None):
        waited = time.monotonic() - start
        if waited > timeout_s:
            raise TimeoutError(
                f"waited {timeout_s:.0f} s for global rank 0 to write {what} at {path}; did rank 0 fail? "
                f"(every rank must see the same cache directory: warmup.cache_dir)"
            )
        if not logged:
            log.info("waiting for global rank 0 to write %s at %s", what, path)
            logged = True
        time.sleep(poll_s)
