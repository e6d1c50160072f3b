"""Sharded data parallelism with FSDP2 (`torch.distributed.fsdp.fully_shard`) for the policy and the reference.

`trainer=fsdp` selects `parallel.strategy.FSDP2Strategy`; `PolicyModule.configure_model` then shards the
policy and its frozen reference with `shard_model`: one FSDP unit per transformer block plus the root (embeddings,
final norm, head), so a rank holds 1/world of every weight, gradient and optimizer state between uses.

`is_sharded` asks without importing FSDP: a model can only be sharded once `torch.distributed.fsdp` is loaded,
and the log-prob passes ask on every call, also where the config check runs.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks to shard one by one: the classes a Hugging Face model names in
    `_no_split_modules`, or else the children of its outermost `nn.ModuleList`s (the built-in model's)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    if names:
        blocks = [m for m in model.modules() if type(m).__name__ in names]
        if blocks:
            return blocks
    blocks, inside = [], set()
    for m in model.modules():
        if isinstance(m, nn.ModuleList) and id(m) not in inside:
            blocks.extend(m)
            inside.update(id(sub) for sub in m.modules())
    return blocks


def shard_model(model: nn.Module, mesh: Any) -> None:
    """Shard `model` over the 1-D device `mesh`: each transformer block is one unit, the rest the root's."""
    blocks = transformer_blocks(model)
    if not blocks:
        raise ValueError(
            f"trainer=fsdp: found no transformer blocks in {type(model).__name__} to shard (no "
            f"`_no_split_modules`, no nn.ModuleList); FSDP2 needs one unit per block to save memory"
        )
    from torch.distributed.fsdp import fully_shard

    for block in blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    # The root's weights are used again at once by the backward, so they stay gathered after the forward.
    fully_shard(model, mesh=mesh, reshard_after_forward=False)


def shard_models(policy: nn.Module, reference: nn.Module | None, mesh: Any | None) -> None:
    """Shard the policy and a separate reference over the data-parallel `mesh` (trainer=fsdp sets one; None:
    nothing to shard); once only, though Lightning may ask again."""
    if mesh is None or is_sharded(policy):
        return
    shard_model(policy, mesh["data_parallel"])
    if reference is not None and reference is not policy:  # LoRA: the policy itself
        shard_model(reference, mesh["data_parallel"])


def is_sharded(model: nn.Module) -> bool:
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


@contextmanager
def gathered(model: nn.Module) -> Iterator[None]:
    """Whole weights on every rank while inside: for sampling and greedy validation.

    Decoding stops when this rank's completions end, so ranks make different numbers of forward passes;
    with the weights gathered once up front (the same collectives on every rank) those passes need no
    communication. Costs one unsharded copy of the weights for the duration. A no-op unless sharded.
    """
    if not is_sharded(model):
        yield
        return
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(unit is not model, recurse=False)  # as shard_model set them
