"""The Lightning strategy for `trainer.strategy`: FSDP2 over all processes, or Lightning's own by name.

Lightning's `strategy=fsdp` (FSDP1) is refused: it needs CUDA, and it runs the training step inside the
wrapped module's forward, where this step's rollout, backward and optimizer steps cannot live.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.strategies import ModelParallelStrategy

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
