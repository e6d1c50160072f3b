"""Sharded data parallelism with FSDP2 (`torch.distributed.fsdp.fully_shard`) for the policy and the reference.

`trainer=fsdp` selects `FSDP2Strategy`: Lightning's `ModelParallelStrategy` with every process in one
data-parallel group and no tensor parallelism. `PolicyModule.configure_model` then shards the policy and
its frozen reference with `shard_model`: one FSDP unit per transformer block plus the root (embeddings,
final norm, head), so a rank holds 1/world of every weight, gradient and optimizer state between uses.

Lightning's `strategy=fsdp` (FSDP1) is refused: it needs CUDA, and it runs the training step inside the
wrapped module's forward, where this step's rollout, backward and optimizer steps cannot live.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard

FSDP2 = "fsdp2"  # trainer.strategy value of conf/trainer/fsdp.yaml


class FSDP2Strategy(ModelParallelStrategy):
    """FSDP2 over all processes (data-parallel size = world size, tensor-parallel size 1).

    Checkpoints are assembled on global rank 0 and written there as one file, like DDP's.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(save_distributed_checkpoint=False, **kwargs)

    def set_world_ranks(self) -> None:
        super().set_world_ranks()
        # ModelParallelStrategy's "auto" sizes put the devices of a node in the tensor-parallel dimension.
        self._data_parallel_size = self.num_nodes * self.num_processes
        self._tensor_parallel_size = 1


def lightning_strategy(name: str) -> Any:
    """What to hand `L.Trainer(strategy=...)` for `trainer.strategy`."""
    if name == FSDP2:
        return FSDP2Strategy()
    if name.startswith("fsdp"):
        raise ValueError(
            f"trainer.strategy={name} is FSDP1, which needs CUDA and cannot host this training step (rollout "
            f"and optimizer steps run inside the training step); use trainer=fsdp (strategy {FSDP2}, FSDP2)"
        )
    return name


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
    for block in blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    # The root's weights are used again at once by the backward, so they stay gathered after the forward.
    fully_shard(model, mesh=mesh, reshard_after_forward=False)


def is_sharded(model: nn.Module) -> bool:
    return isinstance(model, FSDPModule)


@contextmanager
def gathered(model: nn.Module) -> Iterator[None]:
    """Whole weights on every rank while inside: for sampling and greedy validation.

    Decoding stops when this rank's completions end, so ranks make different numbers of forward passes;
    with the weights gathered once up front (the same collectives on every rank) those passes need no
    communication. Costs one unsharded copy of the weights for the duration. A no-op unless sharded.
    """
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
