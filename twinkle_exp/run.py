"""train(cfg): build every piece from the composed config, warm-start, fit, and report where things went."""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from twinkle_exp import metric_names as M
from twinkle_exp.config import Config, TrainerConfig
from twinkle_exp.data import PromptStream, prompts_per_rank
from twinkle_exp.module import PolicyModule
from twinkle_exp.policy import with_task_prompt_format
from twinkle_exp.progress import RolloutProgressBar
from twinkle_exp.ranks import SameOutputDir, check_launch
from twinkle_exp.report.run_summary import print_warnings, summarize_run
from twinkle_exp.rewards import build_rewards
from twinkle_exp.sharding import lightning_strategy
from twinkle_exp.summary import print_summary
from twinkle_exp.tracking import JobInfo, RunStatus, build_loggers
from twinkle_exp.validation import check_config
from twinkle_exp.warmup import warm_start
from twinkle_exp.warmup_cache import cache_key

log = logging.getLogger(__name__)
# The CSV logger writes metrics.csv beside run.json and Hydra's files; it only ever replaces metrics.csv.
warnings.filterwarnings("ignore", message="Experiment logs directory .* exists and is not empty")
# Lightning 2.6 calls a torch pytree API that torch 2.13 deprecates: nothing a user can act on.
warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\)")


def _quiet_lightning() -> None:
    """Lightning prints through its own handlers and Hydra's root handler: keep Hydra's, drop the ads."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    rank_zero.addFilter(lambda record: "litlogger" not in record.getMessage())


def _warmup_device(trainer: TrainerConfig) -> torch.device:
    # The warm-start runs before Lightning takes over the devices: use the GPU the trainer would use.
    wants_gpu = trainer.accelerator in ("auto", "gpu", "cuda")
    return torch.device("cuda" if wants_gpu and torch.cuda.is_available() else "cpu")


def build_module(cfg: Config, rank: int = 0) -> tuple[PolicyModule, dict[str, Any]]:
    """Policy (warm-started), task, rewards and loss, wrapped in a PolicyModule.

    Every rank builds the same initial weights; global rank 0 trains a missing warm-start, the others
    wait for its cache.
    """
    torch.manual_seed(cfg.warmup.seed)  # the initial weights belong to the warm-start, not to the RL seed
    policy = instantiate(cfg.policy)
    task = instantiate(cfg.task)
    policy = with_task_prompt_format(policy, task)  # prompts in the chat template when the task asks
    warm: dict[str, Any] = {"enabled": False}
    if cfg.warmup.enabled:
        if rank == 0:
            policy.model.to(_warmup_device(cfg.trainer))
        key = cache_key(cfg.policy, cfg.task, cfg.warmup, policy, task)
        warm = warm_start(policy, task, cfg.warmup, key, trains=rank == 0)
    module = PolicyModule(
        policy,
        task,
        build_rewards(cfg.reward),
        instantiate(cfg.loss),
        rollout=cfg.rollout,
        advantage=cfg.advantage,
        optim=cfg.optim,
        trainer=cfg.trainer,
        seed=cfg.seed,
    )
    return module, warm


def train(cfg: DictConfig, typed: Config | None = None) -> dict[str, Any]:
    """Run one experiment; returns the figures of its summary. The job's files go to Hydra's output dir.

    Every rank runs this; global rank 0 alone writes run.json, the checkpoint and the summary.
    """
    typed = typed or check_config(cfg)
    _quiet_lightning()
    job = JobInfo.from_hydra()
    status: RunStatus | None = None
    loggers: list[Any] = []
    start = time.time()
    try:
        loggers = build_loggers(cfg, typed.logger, typed.sweep_name, job)
        t = typed.trainer
        updates_per_rollout = typed.optim.mu * typed.optim.num_minibatches
        callbacks = [RolloutProgressBar(updates_per_rollout)] if t.enable_progress_bar else []
        trainer = L.Trainer(
            max_steps=t.max_steps,
            accelerator=t.accelerator,
            devices=t.devices,
            num_nodes=t.num_nodes,
            strategy=lightning_strategy(t.strategy),
            precision=t.precision,
            logger=loggers,
            callbacks=[*callbacks, SameOutputDir(job.output_dir)],
            enable_progress_bar=t.enable_progress_bar,
            enable_checkpointing=False,
            enable_model_summary=False,
            default_root_dir=str(job.output_dir),
            limit_val_batches=0,
            num_sanity_val_steps=0,
        )
        check_launch(trainer, job.multirun)
        status = RunStatus(job, typed.seed, write=trainer.is_global_zero)
        module, warm = build_module(typed, rank=trainer.global_rank)
        log.info("loss: %r", module.loss_fn)
        L.seed_everything(typed.seed, verbose=False)
        share = prompts_per_rank(typed.rollout.prompts_per_step, trainer.world_size)
        stream = PromptStream(module.task, share, typed.seed, rank=trainer.global_rank)
        trainer.fit(module, train_dataloaders=DataLoader(stream, batch_size=None))
        # The last training step validated already; with max_steps=0 this is also the first validation.
        validated = module.last_val_step == trainer.global_step and trainer.global_step > 0
        final = module.last_val if validated else module.log_validation()
        first = module.first_val
        for logger in loggers:
            logger.save()
        checkpoint = None
        if t.save_checkpoint:  # every rank takes part (FSDP2 gathers the shards); rank 0 writes
            checkpoint = job.output_dir / "checkpoints" / "last.ckpt"
            trainer.save_checkpoint(checkpoint, weights_only=False)
        result = {
            "accuracy_before": first[M.VAL_ACCURACY],
            "accuracy_after": final[M.VAL_ACCURACY],
            "steps": trainer.global_step,
            "rollouts": module.rollouts_done,
            "wall_time_s": round(time.time() - start, 1),
            "output_dir": str(job.output_dir),
            "metrics_csv": str(job.output_dir / "metrics.csv"),
            "checkpoint": None if checkpoint is None else str(checkpoint),
            "warmup": warm,
        }
        if trainer.is_global_zero:
            # Dashboard figures (wandb summary, run.json) and checks for known traps, from the run's own CSV.
            result["summary"] = summarize_run(
                job.output_dir / "metrics.csv", cfg, result["wall_time_s"], loggers
            )
        status.finish("finished", final={k: v for k, v in result.items() if k != "warmup"})
        if trainer.is_global_zero:
            print_summary(result, module.loss_fn, loggers, smoke_run="debug" in job.choices)
            print_warnings(result["summary"])
        return result
    except BaseException as exc:
        # Before the trainer knows the rank, Lightning's guess from the launcher's environment decides.
        status = status or RunStatus(job, typed.seed, write=rank_zero_only.rank == 0)
        status.finish("failed", error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if any(isinstance(logger, WandbLogger) for logger in loggers):
            import wandb

            wandb.finish()
