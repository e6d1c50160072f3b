"""PolicyModule: one RL step = rollout -> rewards -> advantages -> reference log-probs -> mu epochs of updates."""

from __future__ import annotations

import copy
import math
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger, WandbLogger

from twinkle_exp import metric_names as M
from twinkle_exp.advantages import group_advantages
from twinkle_exp.evaluation import greedy_accuracy
from twinkle_exp.loss import IGNORE_INDEX
from twinkle_exp.policy import Policy, sequence_logps
from twinkle_exp.rewards import RewardSet
from twinkle_exp.rollout import RolloutBatch, generate
from twinkle_exp.tasks import Task
from twinkle_exp.update_metrics import UpdateMetrics


class PolicyModule(L.LightningModule):
    """Trains `policy` with `loss_fn` against a frozen copy of its initial weights (when the loss has beta > 0).

    Batches are dicts of `prompts` and `answers` (lists of strings). Optimisation is manual: each batch is
    one rollout reused for `optim.mu` epochs of `optim.num_minibatches` optimizer steps each, so
    `trainer.global_step` counts optimizer steps.
    """

    def __init__(
        self, policy: Policy, task: Task, rewards: RewardSet, loss_fn: Any, cfg: dict, seed: int = 0
    ):
        super().__init__()
        self.automatic_optimization = False
        self.policy = policy.model
        self.tokenizer = policy.tokenizer
        self.task, self.rewards, self.cfg, self.seed = task, rewards, cfg, seed
        # Kept in a list so Lightning neither registers it (no checkpoint, no DDP wrap) nor trains it.
        self._reference: list[torch.nn.Module] = []
        self._started = False
        self.rollouts_done = 0
        self.first_val: dict[str, float] = {}  # before the first update: the warm-start's figures
        self.last_val: dict[str, float] = {}
        self.set_loss(loss_fn)

    # --- configuration ---------------------------------------------------------------------------------
    def set_loss(self, loss_fn: Any) -> None:
        """Use `loss_fn` (e.g. a `twinkle_exp.loss.SAPOLoss`) for the updates; builds the reference if needed."""
        if not callable(loss_fn):
            raise ValueError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
        if getattr(loss_fn, "beta", 0.0) > 0 and not self._reference:
            if self._started:
                raise ValueError("cannot switch to a loss with beta > 0 after training started: no reference")
            reference = copy.deepcopy(self.policy).eval().requires_grad_(False)
            self._reference.append(reference)
        self.loss_fn = loss_fn

    @property
    def reference(self) -> torch.nn.Module | None:
        return self._reference[0] if self._reference else None

    def configure_optimizers(self):
        opt = self.cfg["optim"]
        optimizer = torch.optim.AdamW(
            self.policy.parameters(),
            lr=opt["lr"],
            betas=tuple(opt["betas"]),
            weight_decay=opt["weight_decay"],
        )
        warmup = max(1, opt["warmup_steps"])
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return [optimizer], [schedule]

    def on_fit_start(self) -> None:
        self._started = True
        if self.reference is not None:
            self.reference.to(self.device)
        self._sampler = torch.Generator(device=self.device).manual_seed(self.seed * 1000 + self.global_rank)
        self._shuffler = torch.Generator().manual_seed(self.seed * 1000 + self.global_rank)

    # --- one training step -------------------------------------------------------------------------------
    def training_step(self, batch: dict[str, list[str]], batch_idx: int) -> None:
        if self.rollouts_done % self.cfg["trainer"]["val_every"] == 0:
            self.log_validation()
        roll_cfg = self.cfg["rollout"]
        group = roll_cfg["group_size"]
        prompts = [p for p in batch["prompts"] for _ in range(group)]
        answers = [a for a in batch["answers"] for _ in range(group)]

        start = time.perf_counter()
        rollout = self._rollout(batch["prompts"])
        t_rollout = time.perf_counter() - start
        rewards, per_fn = self.rewards(prompts, rollout.completions, answers)
        adv = group_advantages(
            rewards, group, scale=self.cfg["advantage"]["scale"], eps=self.cfg["advantage"]["eps"]
        )
        start = time.perf_counter()
        ref_logps = self._reference_logps(rollout)
        t_reference = time.perf_counter() - start
        start = time.perf_counter()
        update = self._update(rollout, adv.advantages.to(self.device), ref_logps)
        t_update = time.perf_counter() - start

        tokens = float(rollout.completion_lengths.sum())
        metrics = {
            M.REWARD_MEAN: rewards.mean(),
            M.REWARD_STD: rewards.std() if rewards.numel() > 1 else torch.tensor(0.0),
            M.FRAC_REWARD_ZERO_STD: adv.frac_zero_std,
            M.ADVANTAGE_MEAN: adv.advantages.mean(),
            M.ADVANTAGE_STD: adv.advantages.std() if rewards.numel() > 1 else torch.tensor(0.0),
            M.ADVANTAGE_ABS_MEAN: adv.advantages.abs().mean(),
            M.COMPLETION_MEAN_LENGTH: rollout.completion_lengths.float().mean(),
            M.COMPLETION_CLIPPED_RATIO: rollout.truncated.float().mean(),
            M.ROLLOUT_INDEX: float(self.rollouts_done),
            M.LEARNING_RATE: self.optimizers().param_groups[0]["lr"],
            M.TIME_ROLLOUT: t_rollout,
            M.TIME_REFERENCE: t_reference,
            M.TIME_UPDATE: t_update,
            M.ROLLOUT_TOKENS_PER_S: tokens / max(t_rollout, 1e-9),
            M.UPDATE_TOKENS_PER_S: tokens * self.cfg["optim"]["mu"] / max(t_update, 1e-9),
            **{M.REWARD_PREFIX + name: values.mean() for name, values in per_fn.items()},
            **update,
        }
        self._log_to_loggers({k: float(v) for k, v in metrics.items()})
        self.log("reward", rewards.mean(), prog_bar=True, logger=False)
        self.rollouts_done += 1
        if self.rollouts_done % self.cfg["trainer"]["samples_every"] == 0:
            self._log_samples(prompts, rollout.completions, answers, rewards)

    def _rollout(self, prompts: list[str]) -> RolloutBatch:
        r = self.cfg["rollout"]
        self.policy.eval()
        return generate(
            self.policy,
            self.tokenizer,
            prompts,
            group_size=r["group_size"],
            max_new_tokens=r["max_new_tokens"],
            temperature=r["temperature"],
            top_k=r["top_k"],
            top_p=r["top_p"],
            generator=self._sampler,
        )

    @torch.no_grad()
    def _reference_logps(self, b: RolloutBatch) -> torch.Tensor | None:
        if self.reference is None:
            return None
        temperature = self.cfg["rollout"]["temperature"]
        logps, _ = sequence_logps(
            self.reference, b.input_ids, b.attention_mask, b.position_ids, b.labels, temperature=temperature
        )
        return logps

    def _update(self, b: RolloutBatch, advantages: torch.Tensor, ref_logps: torch.Tensor | None) -> dict:
        """mu epochs over shuffled minibatches; each minibatch is one optimizer step (micro-batched inside)."""
        opt_cfg = self.cfg["optim"]
        optimizer, schedule = self.optimizers(), self.lr_schedulers()
        n = b.input_ids.shape[0]
        minibatch = math.ceil(n / opt_cfg["num_minibatches"])
        micro = opt_cfg["micro_batch_size"] or minibatch
        temperature = self.cfg["rollout"]["temperature"]
        stats = UpdateMetrics()
        self.policy.train()
        for epoch in range(opt_cfg["mu"]):
            for rows in torch.randperm(n, generator=self._shuffler).split(minibatch):
                rows = rows.to(self.device)
                totals = {
                    "num_sequences": len(rows),
                    "num_tokens": int(b.completion_lengths[rows].sum()),
                }
                optimizer.zero_grad(set_to_none=True)
                for part in rows.split(micro):
                    logps, entropy = sequence_logps(
                        self.policy,
                        b.input_ids[part],
                        b.attention_mask[part],
                        b.position_ids[part],
                        b.labels[part],
                        temperature=temperature,
                        with_entropy=epoch == 0,
                    )
                    out = self.loss_fn(
                        logps=logps,
                        labels=b.labels[part],
                        advantages=advantages[part],
                        old_logps=b.old_logps[part],
                        ref_logps=None if ref_logps is None else ref_logps[part],
                        **totals,
                    )
                    self.manual_backward(out.loss)
                    stats.add_micro(out, entropy, b.labels[part] != IGNORE_INDEX)
                grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), opt_cfg["max_grad_norm"])
                optimizer.step()
                schedule.step()
                stats.end_step(grad_norm)
        return stats.summary()

    # --- validation and samples --------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        """Greedy decoding on the task's held-out set: exact-match accuracy and mean reward."""
        return greedy_accuracy(
            self.policy,
            self.tokenizer,
            self.task.validation_set(),
            self.rewards,
            max_new_tokens=self.cfg["rollout"]["max_new_tokens"],
            batch_size=self.cfg["trainer"]["val_batch_size"],
        )

    def log_validation(self) -> dict[str, float]:
        """Evaluate on the held-out set and log at the current optimizer step."""
        self.last_val = self.evaluate()
        self.first_val = self.first_val or self.last_val
        self._log_to_loggers(self.last_val)
        if self._trainer is not None and self.trainer.training:
            self.log("acc", self.last_val[M.VAL_ACCURACY], prog_bar=True, logger=False)
        return self.last_val

    def _log_to_loggers(self, metrics: dict[str, float]) -> None:
        # Straight to the loggers: Lightning's self.log would step by batches, and the x-axis here is the
        # optimizer step (trainer.global_step), the same for training and validation metrics.
        for logger in self.loggers:
            logger.log_metrics(metrics, step=self.global_step)
            if isinstance(logger, CSVLogger):
                logger.save()  # so a running job's metrics.csv is readable (the report, tail -f)

    def _log_samples(self, prompts, completions, answers, rewards) -> None:
        rows = [
            [p, c, a, float(r)] for p, c, a, r in zip(prompts, completions, answers, rewards, strict=True)
        ]
        for logger in self.loggers:
            if isinstance(logger, WandbLogger):
                columns = ["prompt", "completion", "answer", "reward"]
                logger.log_table(key=M.SAMPLES_TABLE, columns=columns, data=rows[:32], step=self.global_step)
