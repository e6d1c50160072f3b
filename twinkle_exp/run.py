"""train(cfg): build every piece from the composed config, warm-start, fit, and report where things went."""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader

from twinkle_exp import metric_names as M
from twinkle_exp.config.checks import check_config
from twinkle_exp.config.schema import Config, TrainerConfig
from twinkle_exp.lifecycle import resume, signals
from twinkle_exp.lifecycle.checkpoints import CheckpointCallback, weights_digest
from twinkle_exp.lifecycle.run_end import RunEnd
from twinkle_exp.lifecycle.session import RunSession
from twinkle_exp.parallel.ranks import SameOutputDir, check_data_parallel, check_launch
from twinkle_exp.parallel.strategy import lightning_strategy
from twinkle_exp.summary.run_summary import print_run_summary, summarize_run
from twinkle_exp.tasks.prompt_stream import PromptStream, prompts_per_rank
from twinkle_exp.tracking import provenance
from twinkle_exp.tracking.hydra_record import record_of_job
from twinkle_exp.tracking.loggers import build_loggers
from twinkle_exp.tracking.metrics_file import truncate_rows
from twinkle_exp.tracking.progress import RolloutProgressBar
from twinkle_exp.tracking.run_json import JobInfo, read_run_json, run_wandb_id
from twinkle_exp.tracking.samples_file import SAMPLES_JSONL, truncate_samples
from twinkle_exp.tracking.samples_logger import SamplesFileLogger
from twinkle_exp.training.from_config import policy_and_task, policy_module
from twinkle_exp.training.module import PolicyModule
from twinkle_exp.training.warmup import warm_start
from twinkle_exp.training.warmup_cache import cache_key

log = logging.getLogger(__name__)
# The CSV logger writes metrics.csv beside run.json and Hydra's files; it only ever replaces metrics.csv.
warnings.filterwarnings("ignore", message="Experiment logs directory .* exists and is not empty")
# Lightning 2.6 calls a torch pytree API that torch 2.13 deprecates: nothing a user can act on.
warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\)")
# The prompt stream resumes from the checkpoint's rollout count (data.PromptStream), which Lightning cannot see.
warnings.filterwarnings("ignore", message=".*resuming from a checkpoint that ended before the epoch ended")


def _quiet_lightning() -> None:
    """Lightning prints through its own handlers and Hydra's root handler: keep Hydra's, drop the ads."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    rank_zero.addFilter(lambda record: "litlogger" not in record.getMessage())


def by_answer_length(validation: dict[str, float]) -> dict[str, float]:
    """`{answer length: accuracy}` from one validation's metrics (`M.VAL_ACCURACY_BY_LENGTH` keys)."""
    prefix = M.VAL_ACCURACY_BY_LENGTH
    return {k[len(prefix) :]: v for k, v in validation.items() if k.startswith(prefix)}


def _warmup_device(trainer: TrainerConfig) -> torch.device:
    # The warm-start runs before Lightning takes over the devices: use the GPU the trainer would use.
    wants_gpu = trainer.accelerator in ("auto", "gpu", "cuda")
    return torch.device("cuda" if wants_gpu and torch.cuda.is_available() else "cpu")


def build_module(
    cfg: Config, end: RunEnd | None = None, rank: int = 0
) -> tuple[PolicyModule, dict[str, Any]]:
    """Policy (warm-started), task, rewards and loss, wrapped in a PolicyModule.

    Every rank builds the same initial weights; global rank 0 trains a missing warm-start, the others
    wait for its cache.
    """
    policy, task = policy_and_task(cfg)
    warm: dict[str, Any] = {"enabled": False}
    if cfg.warmup.enabled:
        if rank == 0:
            policy.model.to(_warmup_device(cfg.trainer))
        key = cache_key(cfg.policy, cfg.task, cfg.warmup, policy, task)
        warm = {**warm_start(policy, task, cfg.warmup, key, trains=rank == 0), "key": key}
    module = policy_module(cfg, policy, task, end)
    return module, warm


class _TakeBackSignals(L.Callback):
    """Lightning installs its own SIGTERM handler when training starts (it would exit 0 mid-rollout)."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        signals.reinstall()


def train(cfg: DictConfig, typed: Config | None = None) -> dict[str, Any]:
    """Run one experiment: build -> warm-start -> fit -> finish; returns the figures of its summary.

    The job's files go to Hydra's output dir. Every rank runs this; global rank 0 alone writes run.json,
    the checkpoint and the summary. `cfg.resume` (default "auto") continues the directory's checkpoint.
    How the run ends (finished, interrupted, failed, refused) is `RunSession`'s.
    """
    typed = typed or check_config(cfg)
    _quiet_lightning()
    config = OmegaConf.to_container(cfg, resolve=True)
    session = RunSession(
        JobInfo.from_hydra(), typed.resume, config, typed.seed, typed.trainer.max_steps, record_of_job(cfg)
    )
    job, start, end = session.job, session.start, session.end
    done = session.finished_before()
    if done is not None:
        return done
    began = time.time()
    loggers: list[Any] = []
    with session.running(loggers):
        resume.check_warmup_cache(start)
        # Before the trainer knows the rank, Lightning's guess from the launcher's environment decides.
        if rank_zero_only.rank == 0:  # rows logged after the checkpoint are dropped: the run logs them again
            truncate_rows(job.output_dir / "metrics.csv", start.csv_rows)
            truncate_samples(job.output_dir / SAMPLES_JSONL, start.rollouts_done)
        wandb_id = run_wandb_id(read_run_json(job.output_dir / "run.json"), session.resumed_from)
        loggers += build_loggers(cfg, typed.logger, typed.sweep_name, job, wandb_id=wandb_id)
        if typed.trainer.samples_file_rows > 0:
            t = typed.trainer
            loggers.append(SamplesFileLogger(job.output_dir, t.samples_file_rows, t.samples_file_mb))
        # The trainer (and so the rank) comes before the module: the module's part is filled in below.
        run_info: dict[str, Any] = {"config": config, "reference_digest": None, "warmup": None}
        trainer, checkpoints = _build_trainer(typed, job, loggers, run_info, session)
        resume.check_world_size(start, trainer.world_size)
        session.begin(write=trainer.is_global_zero, wandb_id=wandb_id)
        session.stop_if_asked(start.step, start.checkpoint)  # a signal during the imports: nothing to lose

        module, warm = build_module(typed, end, rank=trainer.global_rank)
        session.stop_if_asked(start.step, start.checkpoint)  # the warm-start stopped, uncached
        reference_digest = weights_digest(module.reference)
        resume.check_reference(start, reference_digest)
        run_info.update(reference_digest=reference_digest, warmup=warm)
        session.record_provenance(
            provenance.collect(
                seed=typed.seed,
                warmup_seed=typed.warmup.seed if typed.warmup.enabled else None,
                device=trainer.strategy.root_device,
                warm_start_key=warm.get("key"),
                reference_digest=reference_digest,
            )
        )

        _fit(trainer, module, typed, session)
        for logger in loggers:
            logger.save()
        # Stopped before it wrote a checkpoint of its own: the one it resumed from is still the latest.
        saved = checkpoints is not None and checkpoints.path.exists()
        checkpoint = checkpoints.path if saved else start.checkpoint
        if not end.done(trainer.global_step):  # a stop in training, or a signal before it
            session.stop_if_asked(trainer.global_step, checkpoint)

        result = _final_figures(trainer, module, job, began, checkpoint, warm)
        if trainer.is_global_zero:
            # Dashboard figures (wandb summary, run.json) and checks for known traps, from the run's own CSV.
            result["summary"] = summarize_run(
                job.output_dir / "metrics.csv", cfg, result["wall_time_s"], loggers
            )
        session.finish({k: v for k, v in result.items() if k != "warmup"})
        if trainer.is_global_zero:
            healthy = [lg for lg in loggers if not getattr(lg, "failure", None)]
            print_run_summary(result, module.loss_fn, healthy, smoke_run="debug" in job.choices)
        return result


def _build_trainer(
    typed: Config, job: JobInfo, loggers: list[Any], run_info: dict[str, Any], session: RunSession
) -> tuple[L.Trainer, CheckpointCallback | None]:
    """The Lightning Trainer of `typed.trainer` for `session.end`'s budget, checked for a launch that would not
    do what was asked."""
    t = typed.trainer
    callbacks: list[Any] = [_TakeBackSignals()]
    checkpoints = None
    if t.save_checkpoint:
        checkpoints = CheckpointCallback(
            job.output_dir, t.checkpoint_every, run_info, loggers[0].rows_written
        )
        callbacks.append(checkpoints)
    if t.enable_progress_bar:
        callbacks.append(RolloutProgressBar(typed.optim.mu * typed.optim.num_minibatches))
    trainer = L.Trainer(
        max_steps=session.end.max_steps,
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=lightning_strategy(t.strategy),
        precision=t.precision,
        logger=loggers,
        callbacks=[*callbacks, SameOutputDir(job.output_dir)],
        # Requeueing is done after the checkpoint at the step boundary (stopping.py), not by Lightning.
        plugins=[SLURMEnvironment(auto_requeue=False)] if session.is_slurm else None,
        enable_progress_bar=t.enable_progress_bar,
        enable_checkpointing=False,
        enable_model_summary=False,
        default_root_dir=str(job.output_dir),
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    check_launch(trainer, job.multirun)
    check_data_parallel(trainer, t)
    return trainer, checkpoints


def _fit(trainer: L.Trainer, module: PolicyModule, typed: Config, session: RunSession) -> None:
    start = session.start
    if start.checkpoint is not None:
        log.warning("resuming from %s at optimizer step %d", start.checkpoint, start.step)
    log.info("loss: %r", module.loss_fn)
    L.seed_everything(typed.seed, verbose=False)
    share = prompts_per_rank(typed.rollout.prompts_per_step, trainer.world_size)
    stream = PromptStream(module.task, share, typed.seed, rank=trainer.global_rank, start=start.rollouts_done)
    # A SIGTERM before on_train_start takes the handler back from Lightning makes Lightning raise an
    # exception that would exit 0; the signal our handler recorded is dealt with by the caller instead.
    if not session.end.signalled():
        session.fitting = True
        with contextlib.suppress(SIGTERMException):
            trainer.fit(
                module,
                train_dataloaders=DataLoader(stream, batch_size=None),
                ckpt_path=None if start.checkpoint is None else str(start.checkpoint),
            )
    module.finish_cut_rollout()  # when resumed at max_steps, fit ran no hook that would have


def _final_figures(
    trainer: L.Trainer,
    module: PolicyModule,
    job: JobInfo,
    began: float,
    checkpoint: Any,
    warm: dict[str, Any],
) -> dict[str, Any]:
    """The run's result; validates once more unless its last training step already did."""
    final = module.validator.final_figures(module)
    for logger in trainer.loggers:
        logger.save()
    return {
        "accuracy_before": module.validation.first[M.VAL_ACCURACY],
        "accuracy_after": final[M.VAL_ACCURACY],
        # {answer length: accuracy}: where a plateau sits (empty for tasks of free-form answers)
        "accuracy_by_length_before": by_answer_length(module.validation.first),
        "accuracy_by_length_after": by_answer_length(final),
        "steps": trainer.global_step,
        "rollouts": module.rollouts_done,
        "wall_time_s": round(time.time() - began, 1),
        "output_dir": str(job.output_dir),
        "metrics_csv": str(job.output_dir / "metrics.csv"),
        "checkpoint": None if checkpoint is None else str(checkpoint),
        "warmup": warm,
    }
