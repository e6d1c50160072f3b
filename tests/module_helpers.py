"""Builders for in-process PolicyModule tests: a tiny policy on addition, a dense reward, one-process fits."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

from twinkle_exp import metric_names as M
from twinkle_exp.config.schema import AdvantageConfig, OptimConfig, RolloutConfig, TrainerConfig
from twinkle_exp.policy.build import tiny_policy
from twinkle_exp.rewards import RewardFunction, RewardSet
from twinkle_exp.tasks import AdditionTask, Task
from twinkle_exp.tasks.prompt_stream import PromptStream
from twinkle_exp.training.module import PolicyModule


def digit_fraction(prompts: list[str], completions: list[str], answers: list[str]) -> list[float]:
    """Share of digits in the completion: a dense reward that differs between random completions."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def make_module(
    loss: Any,
    seed: int = 0,
    dropout: float = 0.0,
    model: dict | None = None,
    task: Task | None = None,
    rollout: dict | None = None,
    **optim: Any,
) -> PolicyModule:
    """A random tiny policy (no warm-start) on 4 prompts x 4 samples of `task` (default: addition), with
    `optim` overrides (`rollout`: the rollout's). `model` overrides the policy's size (default: 1 layer of width 32).

    Sampling a random policy at temperature 1 writes random characters, so the digit fraction differs within
    a group, the advantages are non-zero, and every parameter gets a non-zero policy-gradient. Such text
    rarely ends with EOS within 8 tokens, so truncated completions keep their reward (`truncated_max=None`):
    with the default cap of 0 every reward of a rollout could be 0, depending on the seed's draws.
    """
    torch.manual_seed(seed)
    size = {"d_model": 32, "n_layers": 1, "n_heads": 2} | (model or {})
    policy = tiny_policy(**size, max_seq_len=32, dropout=dropout)
    task = task or AdditionTask(min_digits=1, max_digits=2, num_validation=8)
    rewards = RewardSet([RewardFunction("digits", digit_fraction)], truncated_max=None)
    return PolicyModule(
        policy,
        task,
        rewards,
        loss,
        rollout=RolloutConfig(
            **{"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 8} | (rollout or {})
        ),
        advantage=AdvantageConfig(scale="group"),
        optim=OptimConfig(**{"lr": 1e-3, "mu": 2, "num_minibatches": 2, "max_grad_norm": 1.0} | optim),
        trainer=TrainerConfig(val_every=10, val_batch_size=8, samples_every=1000),
        seed=seed,
    )


def fit(
    module: PolicyModule,
    tmp_path: Path,
    max_steps: int,
    precision: str = "32-true",
    plugins: list | None = None,
) -> list[dict[str, str]]:
    """Train for `max_steps` optimizer steps (`plugins`: e.g. a precision plugin); returns metrics.csv's rows."""
    trainer = L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        precision=None if plugins else precision,
        plugins=plugins,
        logger=CSVLogger(str(tmp_path), name="", version=""),
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp_path),
    )
    stream = PromptStream(module.task, module.rollout_cfg.prompts_per_step, seed=0)
    trainer.fit(module, train_dataloaders=DataLoader(stream, batch_size=None))
    for logger in trainer.loggers:
        logger.save()
    with open(tmp_path / "metrics.csv") as f:
        return list(csv.DictReader(f))


def update_rows(rows: list[dict[str, str]]) -> list[dict[str, float]]:
    """The per-optimizer-step rows (those with a loss), as floats."""
    return [{k: float(v) for k, v in r.items() if v != ""} for r in rows if r.get(M.LOSS)]
