"""Which process does what when a run has several ranks: one output directory, and launches that work.

Global rank 0 writes the run's files (run.json, metrics, checkpoints, the warm-start cache, the summary);
the other ranks only train. They must agree on the output directory, which is where a run's pieces meet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import lightning as L
from lightning.pytorch.callbacks import Callback

from twinkle_exp.errors import UserError
from twinkle_exp.parallel import collectives


class ParallelSettings(Protocol):
    """What `check_data_parallel` reads of the trainer's settings (`config.schema.TrainerConfig` has it):
    parallel/ sits below config/, so it names the two fields rather than import the type."""

    strategy: str
    devices: Any


def spawns_processes(trainer: L.Trainer) -> bool:
    """Whether Lightning itself will start this node's other ranks (re-running the command line)."""
    env = getattr(trainer.strategy, "cluster_environment", None)
    return trainer.num_devices > 1 and env is not None and not env.creates_processes_externally


def check_launch(trainer: L.Trainer, multirun: bool) -> None:
    """Refuse a Hydra multirun whose jobs Lightning would each re-launch: the re-launched ranks would re-run
    the whole sweep from its command line, not the job."""
    if multirun and spawns_processes(trainer):
        raise ValueError(
            f"a multirun (-m) cannot start {trainer.num_devices} processes per job itself "
            f"(trainer.devices={trainer.num_devices}): start every rank with torchrun "
            f"(torchrun --nproc-per-node={trainer.num_devices} -m twinkle_exp -m ... hydra.sweep.dir=<dir>), "
            f"or give each job its own allocation with hydra/launcher=slurm (docs/scaling-out.md)"
        )


def check_data_parallel(trainer: L.Trainer, cfg: ParallelSettings) -> None:
    """Refuse a data-parallel strategy that found no GPU and was given no device count: Lightning would run
    one CPU process, with nothing in parallel, where the user asked for data parallelism."""
    on_cpu = type(trainer.accelerator).__name__ == "CPUAccelerator"
    parallel = str(cfg.strategy).startswith(("ddp", "fsdp"))
    if parallel and on_cpu and str(cfg.devices) == "auto" and trainer.world_size == 1:
        raise UserError(
            f"trainer.strategy={cfg.strategy} found no GPU, and trainer.devices=auto on a CPU is one process: "
            "pass trainer.accelerator=cpu trainer.devices=N for N CPU processes (gloo), or use trainer=cpu"
        )


class SameOutputDir(Callback):
    """Stop at start-up, on every rank, unless all ranks write to one output directory.

    Lightning's own launcher hands its directory to the ranks it starts; torchrun, srun and several nodes
    start every rank's Hydra separately, and Hydra's default directory holds the start time, so each rank
    would get its own directory unless `hydra.run.dir` / `hydra.sweep.dir` names one.
    """

    def __init__(self, output_dir: Path) -> None:
        self.output_dir = str(Path(output_dir).resolve())

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        dirs = collectives.all_gather_object(self.output_dir)
        if len(set(dirs)) > 1:
            listing = ", ".join(f"rank {r}: {d}" for r, d in enumerate(dirs))
            raise RuntimeError(
                f"the ranks of this run have different output directories ({listing}); when every rank "
                f"starts its own Hydra (torchrun, srun, several nodes) pass one shared directory: "
                f"hydra.run.dir=<dir> (or hydra.sweep.dir=<dir> with -m)"
            )
