"""PolicyModule: one RL step = rollout -> rewards -> advantages -> reference log-probs -> mu epochs of updates."""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
import torch

from twinkle_exp import distributed
from twinkle_exp import metric_names as M
from twinkle_exp.advantages import group_advantages
from twinkle_exp.config import AdvantageConfig, OptimConfig, RolloutConfig, TrainerConfig
from twinkle_exp.evaluation import greedy_totals, validation_metrics
from twinkle_exp.models.hf import set_update_mode
from twinkle_exp.models.lora import is_lora, trainable_parameters, trainable_state_dict
from twinkle_exp.old_logps import has_dropout, recompute_old_logps, should_recompute
from twinkle_exp.policy import Policy, sequence_logps
from twinkle_exp.reference import Reference
from twinkle_exp.rewards import RewardSet
from twinkle_exp.rollout import RolloutBatch, generate
from twinkle_exp.rollout_metrics import RolloutRows, StageTimer, rollout_metrics
from twinkle_exp.sharding import gathered, is_sharded, shard_model
from twinkle_exp.tasks import Task
from twinkle_exp.tracking import log_metrics, log_samples
from twinkle_exp.update_metrics import StepMetrics

log = logging.getLogger(__name__)


def _check_minibatches(num_minibatches: int, rows: int, ranks: int) -> None:
    """Every rank splits its share of the rollout's `rows` into `num_minibatches` non-empty minibatches."""
    if num_minibatches > rows // ranks:
        raise ValueError(
            f"optim.num_minibatches={num_minibatches} is more than the {rows // ranks} samples of a rollout "
            f"on each of the {ranks} ranks (rollout.prompts_per_step x rollout.group_size / ranks)"
        )


class PolicyModule(L.LightningModule):
    """Trains `policy` with `loss_fn` against a frozen copy of its initial weights (when the loss has beta > 0).

    Batches are dicts of `prompts` and `answers` (lists of strings). Optimisation is manual: each batch is
    one rollout reused for `optim.mu` epochs of `optim.num_minibatches` optimizer steps each, so
    `trainer.global_step` counts optimizer steps.

    Under data parallelism (DDP, FSDP2) each rank samples its own prompts' groups; advantages, the losses'
    normalisers, the logged metrics and validation are the global batch's, so a step's result does not
    depend on the number of ranks (README, "Scaling out").
    """

    def __init__(
        self,
        policy: Policy,
        task: Task,
        rewards: RewardSet,
        loss_fn: Any,
        *,
        rollout: RolloutConfig,
        advantage: AdvantageConfig,
        optim: OptimConfig,
        trainer: TrainerConfig,
        seed: int = 0,
    ):
        super().__init__()
        self.automatic_optimization = False
        self.policy = policy.model
        self.tokenizer = policy.tokenizer
        self.task, self.rewards, self.seed = task, rewards, seed
        self.rollout_cfg, self.advantage_cfg = rollout, advantage
        self.optim_cfg, self.trainer_cfg = optim, trainer
        _check_minibatches(optim.num_minibatches, rollout.prompts_per_step * rollout.group_size, ranks=1)
        # Kept in a list so Lightning neither registers it (no checkpoint, no DDP wrap) nor trains it.
        self._reference: list[Reference] = []
        self._load_reference = policy.load_reference
        self.strict_loading = not is_lora(self.policy)  # a LoRA checkpoint may hold the adapters only
        self._started = False
        self.rollouts_done = 0
        self.first_val: dict[str, float] = {}  # before the first update: the warm-start's figures
        self.last_val: dict[str, float] = {}
        self.last_val_step = -1
        self.set_loss(loss_fn)

    # --- configuration ---------------------------------------------------------------------------------
    def set_loss(self, loss_fn: Any) -> None:
        """Use `loss_fn` (e.g. a `twinkle_exp.loss.SAPOLoss`) for the updates; builds the reference if needed."""
        if not callable(loss_fn):
            raise ValueError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
        if getattr(loss_fn, "beta", 0.0) > 0 and not self._reference:
            if self._started:
                raise ValueError("cannot switch to a loss with beta > 0 after training started: no reference")
            self._reference.append(Reference.of(self.policy, self._load_reference))
        self.loss_fn = loss_fn

    @property
    def reference(self) -> torch.nn.Module | None:
        """The reference model; with LoRA the policy itself, which the reference pass runs without adapters."""
        return self._reference[0].model if self._reference else None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["state_dict"] = trainable_state_dict(self.policy, checkpoint["state_dict"], "policy.")

    def configure_optimizers(self):
        opt = self.optim_cfg
        optimizer = torch.optim.AdamW(
            trainable_parameters(self.policy),
            lr=opt.lr,
            betas=tuple(opt.betas),
            weight_decay=opt.weight_decay,
        )
        warmup = max(1, opt.warmup_steps)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
        return [optimizer], [schedule]

    def configure_model(self) -> None:
        # Only ModelParallelStrategy (trainer=fsdp) sets a device mesh; Lightning may call this hook again.
        if self.device_mesh is None or is_sharded(self.policy):
            return
        mesh = self.device_mesh["data_parallel"]
        shard_model(self.policy, mesh)
        if self.reference is not None and self.reference is not self.policy:  # LoRA: the policy itself
            shard_model(self.reference, mesh)

    def setup(self, stage: str) -> None:
        rows = self.rollout_cfg.prompts_per_step * self.rollout_cfg.group_size
        _check_minibatches(self.optim_cfg.num_minibatches, rows, self.trainer.world_size)

    def on_fit_start(self) -> None:
        self._started = True
        if self._reference:
            self._reference[0].to(self.device)
        self._recompute_old_logps = should_recompute(
            self.optim_cfg.old_logps, self.trainer.precision, self.policy
        )
        if self.optim_cfg.update_dropout and has_dropout(self.policy):
            log.warning(
                "optim.update_dropout=true: dropout is on in the update, so on-policy ratios are not 1"
            )
        self._sampler = torch.Generator(device=self.device).manual_seed(self.seed * 1000 + self.global_rank)
        self._shuffler = torch.Generator().manual_seed(self.seed * 1000 + self.global_rank)

    # --- one training step: the README's data flow, in order -------------------------------------------
    def training_step(self, batch: dict[str, list[str]], batch_idx: int) -> None:
        if self.rollouts_done % self.trainer_cfg.val_every == 0:
            self.log_validation()
        timer = StageTimer()
        with timer(M.TIME_ROLLOUT):
            rollout = self._rollout(batch["prompts"])
        prompts, answers = rollout.per_row(batch["prompts"]), rollout.per_row(batch["answers"])
        rewards, per_fn = self.rewards(prompts, rollout.completions, answers, rollout.truncated)
        # Every rank computes the advantages of the global batch (its groups are whole, so only
        # advantage=batch's std needs the others' rewards) and trains on its own rows.
        everyone = RolloutRows(rewards, per_fn, rollout.completion_lengths, rollout.truncated).gathered()
        adv = group_advantages(
            everyone.rewards, rollout.group_size, self.advantage_cfg.scale, self.advantage_cfg.eps
        )
        mine = adv.advantages.tensor_split(distributed.world_size())[distributed.rank()]
        with timer(M.TIME_REFERENCE):
            ref_logps = self._reference_logps(rollout)
        with timer(M.TIME_UPDATE):
            self._update(rollout, mine.to(self.device), ref_logps)
        seconds = distributed.max_over_ranks(timer.seconds)  # the slowest rank's
        metrics = rollout_metrics(everyone, adv, seconds, epochs=self.optim_cfg.mu)
        # What the reward functions counted (math: parse failures), over every rank's completions.
        metrics |= distributed.sum_over_ranks(self.rewards.last_metrics)
        log_metrics(self.loggers, metrics | {M.ROLLOUT_INDEX: float(self.rollouts_done)}, self.global_step)
        self.log("reward", metrics[M.REWARD_MEAN], prog_bar=True, logger=False)
        self.rollouts_done += 1
        if self.global_step >= self.trainer.max_steps:
            self.log_validation()  # the final one, inside fit so the progress bar shows the summary's figure
        if self.rollouts_done % self.trainer_cfg.samples_every == 0:
            rows = list(zip(prompts, rollout.completions, answers, rewards.tolist(), strict=True))
            log_samples(
                self.loggers, ["prompt", "completion", "answer", "reward"], rows[:32], self.global_step
            )

    def _lr(self) -> float:
        return self.optimizers().param_groups[0]["lr"]

    def _rollout(self, prompts: list[str]) -> RolloutBatch:
        r = self.rollout_cfg
        self.policy.eval()
        with gathered(self.policy):
            return generate(
                self.policy,
                self.tokenizer,
                prompts,
                group_size=r.group_size,
                max_new_tokens=r.max_new_tokens,
                temperature=r.temperature,
                top_k=r.top_k,
                top_p=r.top_p,
                generator=self._sampler,
            )

    @torch.no_grad()
    def _reference_logps(self, b: RolloutBatch) -> torch.Tensor | None:
        if not self._reference:
            return None
        with self._reference[0].weights() as reference:
            logps, _ = sequence_logps(
                reference,
                b.input_ids,
                b.attention_mask,
                b.position_ids,
                b.labels,
                temperature=self.rollout_cfg.temperature,
            )
        return logps

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # Lightning calls this after it unscales AMP (16-mixed) gradients, so the norm and the clipping see
        # the true gradients under every precision. The gradients are already averaged over the ranks (DDP)
        # or sharded (FSDP2, where the norm comes back as a replicated DTensor): the norm is the global one.
        max_norm = self.optim_cfg.max_grad_norm or float("inf")  # 0 or None: measure, do not clip
        norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), max_norm)
        self._grad_norm = distributed.full_value(norm)

    def _update(self, b: RolloutBatch, advantages: torch.Tensor, ref_logps: torch.Tensor | None) -> None:
        """mu epochs of num_minibatches optimizer steps over shuffled rows, each logged at its own step.

        Stops at trainer.max_steps, so the last rollout runs only the steps left.
        """
        opt = self.optim_cfg
        n = b.input_ids.shape[0]
        epochs = [
            torch.randperm(n, generator=self._shuffler).tensor_split(opt.num_minibatches)
            for _ in range(opt.mu)
        ]
        micro = opt.micro_batch_size or n
        old_logps = b.old_logps
        if self._recompute_old_logps:
            self.policy.eval()
            first_step_split = [part.to(self.device) for rows in epochs[0] for part in rows.split(micro)]
            old_logps = recompute_old_logps(self.policy, b, first_step_split, self.rollout_cfg.temperature)
        set_update_mode(self.policy, dropout=opt.update_dropout)  # keeps gradient checkpointing on
        for step, rows in enumerate(rows for epoch in epochs for rows in epoch):
            if self.global_step >= self.trainer.max_steps:
                break
            parts = [part.to(self.device) for part in rows.split(micro)]
            stats = self._optimizer_step(b, parts, advantages, old_logps, ref_logps, sampler_gap=step == 0)
            log_metrics(self.loggers, stats, self.global_step)

    def _optimizer_step(
        self,
        b: RolloutBatch,
        parts: list[torch.Tensor],
        advantages: torch.Tensor,
        old_logps: torch.Tensor,
        ref_logps: torch.Tensor | None,
        sampler_gap: bool,
    ) -> dict[str, float]:
        """One optimizer step on the rows `parts` (its micro-batches); returns the step's metrics.

        The losses are normalised by the global step's totals, and DDP and FSDP2 average the ranks'
        gradients, so each rank's loss is scaled by the number of ranks: the averaged gradient is then
        the gradient of the global batch's loss, whatever the ranks' shares of sequences and tokens.
        """
        optimizer = self.optimizers()
        mask = b.completion_mask
        rows = torch.cat(parts)
        seqs, tokens = distributed.step_totals(len(rows), int(mask[rows].sum()), self.device)
        totals = {"num_sequences": seqs, "num_tokens": tokens}
        ranks = distributed.world_size()
        stats = StepMetrics()
        optimizer.zero_grad(set_to_none=True)
        for part in parts:
            logps, entropy = sequence_logps(
                self.policy,
                b.input_ids[part],
                b.attention_mask[part],
                b.position_ids[part],
                b.labels[part],
                temperature=self.rollout_cfg.temperature,
                with_entropy=True,
            )
            out = self.loss_fn(
                logps=logps,
                labels=b.labels[part],
                advantages=advantages[part],
                old_logps=old_logps[part],
                ref_logps=None if ref_logps is None else ref_logps[part],
                **totals,
            )
            self.manual_backward(out.loss * ranks)
            gap = logps.detach() - b.old_logps[part] if sampler_gap else None
            stats.add_micro(out, mask[part], entropy, gap)
        lr = self._lr()
        optimizer.step()  # clips in on_before_optimizer_step
        self.lr_schedulers().step()
        return stats.summary(self._grad_norm, lr)

    # --- validation --------------------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        """Greedy decoding on the task's held-out set: exact-match accuracy and mean reward.

        Each rank decodes its share of the examples and the totals are summed, so every example counts once.
        """
        with gathered(self.policy):
            totals = greedy_totals(
                self.policy,
                self.tokenizer,
                distributed.shard(self.task.validation_set()),
                self.rewards,
                max_new_tokens=self.rollout_cfg.max_new_tokens,
                batch_size=self.trainer_cfg.val_batch_size,
            )
        return validation_metrics(distributed.all_reduce(totals, "sum"))

    def log_validation(self) -> dict[str, float]:
        """Evaluate on the held-out set and log at the current optimizer step."""
        self.last_val, self.last_val_step = self.evaluate(), self.global_step
        self.first_val = self.first_val or self.last_val
        log_metrics(self.loggers, self.last_val, self.global_step)
        if self._trainer is not None and self.trainer.training:
            self.log("acc", self.last_val[M.VAL_ACCURACY], prog_bar=True, logger=False)
        return self.last_val
