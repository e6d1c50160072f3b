"""In-process runs that checkpoint, stop on a signal sent from inside a step, and resume: the trainer's
resume path (checkpoint callback, appending metrics.csv, stream start, ckpt_path) without the CLI."""

from __future__ import annotations

import csv
import os
import signal
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from twinkle_exp.lifecycle import signals
from twinkle_exp.lifecycle.checkpoints import CheckpointCallback, last_checkpoint
from twinkle_exp.tasks.prompt_stream import PromptStream
from twinkle_exp.tracking.metrics_file import MetricsCSVLogger, truncate_rows
from twinkle_exp.training.module import PolicyModule


class _TakeBackSignals(L.Callback):
    def on_train_start(self, trainer, pl_module) -> None:
        signals.reinstall()


def signal_at_loss_call(module: PolicyModule, call: int, signum: int = signal.SIGTERM) -> None:
    """Make the module's loss send `signum` to this process on its `call`-th call (1-based): a real signal
    arriving in the middle of an optimizer step."""
    module.loss_fn = _SignalAtCall(module.loss_fn, call, signum)


class _SignalAtCall:
    """The wrapped loss, with what the `LossFn` protocol declares (beta, needs_entropy, entropy_grad, zero_advantage_inert)."""

    def __init__(self, inner, call: int, signum: int) -> None:
        self.inner, self.call, self.signum, self.calls = inner, call, signum, 0
        self.beta, self.needs_entropy = inner.beta, inner.needs_entropy
        self.entropy_grad = inner.entropy_grad
        self.zero_advantage_inert = inner.zero_advantage_inert

    def __getattr__(self, name: str) -> Any:  # anything else the trainer reads (the spec, metric keys)
        return getattr(self.inner, name)

    def __call__(self, **inputs: Any):
        self.calls += 1
        if self.calls == self.call:
            os.kill(os.getpid(), self.signum)
        return self.inner(**inputs)


def fit_resumable(
    module: PolicyModule, run_dir: Path, max_steps: int, every: int | None = None, resume: bool = False
) -> L.Trainer:
    """Fit `module` in `run_dir` as run.py does, from `run_dir`'s checkpoint when `resume`."""
    ckpt, start = None, 0
    if resume:
        ckpt = last_checkpoint(run_dir)
        saved = torch.load(ckpt, map_location="cpu", weights_only=False)
        start = saved["twinkle_module"]["rollouts_done"]
        truncate_rows(run_dir / "metrics.csv", saved["twinkle_run"]["csv_rows"])
    logger = MetricsCSVLogger(run_dir)
    checkpoints = CheckpointCallback(run_dir, every, {"config": {}}, logger.rows_written)
    trainer = L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        logger=logger,
        callbacks=[_TakeBackSignals(), checkpoints],
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=str(run_dir),
    )
    stream = PromptStream(module.task, module.rollout_cfg.prompts_per_step, seed=module.seed, start=start)
    signals.install()
    try:
        trainer.fit(module, train_dataloaders=DataLoader(stream, batch_size=None), ckpt_path=ckpt)
    finally:
        signals.restore()
    return trainer


def csv_rows(path: Path, drop_prefix: str = "time/") -> list[dict[str, str]]:
    """metrics.csv's rows without the wall-clock columns (the only ones a resumed run may change)."""
    with open(path, newline="") as f:
        return [
            {k: v for k, v in row.items() if not k.startswith(drop_prefix) and v != ""}
            for row in csv.DictReader(f)
        ]


def weights(module: PolicyModule) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.policy.state_dict().items()}
