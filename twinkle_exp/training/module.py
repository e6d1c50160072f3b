"""PolicyModule: one RL step = rollout -> rewards -> advantages -> reference log-probs -> mu epochs of updates."""

from __future__ import annotations

import logging
import time
from typing import Any

import lightning as L
import torch

from twinkle_exp import metric_names as M
from twinkle_exp.config.schema import AdvantageConfig, OptimConfig, RolloutConfig, TrainerConfig
from twinkle_exp.lifecycle import rng_state, signals
from twinkle_exp.lifecycle.nonfinite import NonFiniteGuard
from twinkle_exp.loss import LossFn
from twinkle_exp.loss.advantages import AdvantageSettings, estimate
from twinkle_exp.models.hf import set_update_mode
from twinkle_exp.models.lora import is_lora, trainable_parameters, trainable_state_dict
from twinkle_exp.parallel import collectives
from twinkle_exp.parallel.sharding import gathered, is_sharded, shard_model
from twinkle_exp.policy.build import Policy
from twinkle_exp.policy.logprobs import sequence_logps
from twinkle_exp.policy.reference import Reference
from twinkle_exp.policy.shared_prefix import PrefixIndex, SharedPrefix
from twinkle_exp.rewards import NonFiniteRewardError, RewardSet
from twinkle_exp.sampling.generate import Decoding, RolloutBatch, SamplingOptions, generate
from twinkle_exp.sampling.sampler_copy import SamplerCopy
from twinkle_exp.tasks import Task
from twinkle_exp.tracking.loggers import log_metrics, log_samples
from twinkle_exp.tracking.samples_logger import keep_samples
from twinkle_exp.training import checkpoint_state
from twinkle_exp.training.evaluation import (
    greedy_totals,
    length_buckets,
    startup_truncation_warning,
    validation_metrics,
)
from twinkle_exp.training.generators import RolloutGenerators
from twinkle_exp.training.old_logps import (
    has_dropout,
    recompute_old_logps,
    recompute_reasons,
    should_recompute,
)
from twinkle_exp.training.optimizer import adamw
from twinkle_exp.training.prompt_repeats import rollout_repeats_prompt
from twinkle_exp.training.rollout_metrics import RolloutRows, StageTimer, TruncationWatch, rollout_metrics
from twinkle_exp.training.update_plan import UpdatePlan, shuffled_steps
from twinkle_exp.training.update_step import accumulate_gradients
from twinkle_exp.training.validation_record import ValidationRecord

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
    `trainer.global_step` counts optimizer steps. Training can stop between any two optimizer steps (a
    signal, too many non-finite steps: `stop_reason`); the rollout's remaining steps then stay in
    `pending`, which a checkpoint holds, so a resumed run finishes them first.

    Under data parallelism (DDP, FSDP2) each rank samples its own prompts' groups; advantages, the losses'
    normalisers, the logged metrics and validation are the global batch's, so a step's result does not
    depend on the number of ranks (docs/scaling-out.md).
    """

    def __init__(
        self,
        policy: Policy,
        task: Task,
        rewards: RewardSet,
        loss_fn: LossFn,
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
        self.validation = ValidationRecord()
        self.pending: UpdatePlan | None = None  # the rollout whose optimizer steps are not all done
        self.stop_reason: str | None = None  # why training stopped before max_steps, when it did
        self.stop_signal: int | None = None  # the signal that stopped it (None: non-finite values)
        self.nonfinite = NonFiniteGuard(optim.max_skipped_steps)
        self.generators = RolloutGenerators()
        self.truncation = TruncationWatch(rollout.max_new_tokens, rewards.truncated_max)
        self._startup_checked = False  # whether the validation before training was checked for truncation
        self._restored: dict[str, Any] | None = None  # this rank's checkpoint state, applied as it is needed
        self._skipped_for: str | None = None  # why on_before_optimizer_step skipped the current step
        self._sampler_copy = SamplerCopy(rollout.sampler_dtype)  # rollout.sampler_dtype
        self.set_loss(loss_fn)

    # --- configuration ---------------------------------------------------------------------------------
    def set_loss(self, loss_fn: LossFn) -> None:
        """Use `loss_fn` (e.g. a `twinkle_exp.loss.SAPOLoss`) for the updates; builds the reference if needed."""
        if not isinstance(loss_fn, LossFn):
            raise ValueError(
                f"loss_fn must be a LossFn (callable, with a beta), got {type(loss_fn).__name__}"
            )
        if loss_fn.beta > 0 and not self._reference:
            if self._started:
                raise ValueError("cannot switch to a loss with beta > 0 after training started: no reference")
            self._reference.append(Reference.of(self.policy, self._load_reference))
        self.loss_fn = loss_fn

    @property
    def reference(self) -> torch.nn.Module | None:
        """The reference model; with LoRA the policy itself, which the reference pass runs without adapters."""
        return self._reference[0].model if self._reference else None

    def configure_optimizers(self):
        opt = self.optim_cfg
        optimizer = adamw(
            trainable_parameters(self.policy),
            lr=opt.lr,
            betas=tuple(opt.betas),
            weight_decay=opt.weight_decay,
            fused=opt.fused_adamw,
            loss_scaler=getattr(self._trainer and self.trainer.precision_plugin, "scaler", None),
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
            self.optim_cfg.old_logps,
            self.trainer.precision,
            self.policy,
            correction=self.optim_cfg.rollout_correction.mode,
            sampler_dtype=self.rollout_cfg.sampler_dtype,
        )
        reasons = recompute_reasons(self.trainer.precision, self.policy, self.rollout_cfg.sampler_dtype)
        if reasons and self.optim_cfg.old_logps == "sampler":
            log.warning(
                "optim.old_logps=sampler with %s: the sampler's log-probs differ from the update's, so "
                "on-policy ratios are not 1 (optim.old_logps=auto recomputes them)",
                ", ".join(reasons),
            )
        if self.optim_cfg.update_dropout and has_dropout(self.policy):
            log.warning(
                "optim.update_dropout=true: dropout is on in the update, so on-policy ratios are not 1"
            )
        self.generators.start(self.device, self.seed, self.global_rank, self._restored)
        if self.pending is not None:  # restored from a checkpoint onto the CPU
            self.pending = self.pending.to(self.device)

    # --- checkpoints: counters, this rollout's remaining steps and every random state (checkpoint_state) ----
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Under LoRA only the adapters are trained: the checkpoint holds them, not the frozen base model.
        checkpoint["state_dict"] = trainable_state_dict(self.policy, checkpoint["state_dict"], "policy.")
        checkpoint[checkpoint_state.KEY] = checkpoint_state.capture(self)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint[checkpoint_state.KEY]
        self._restored = checkpoint_state.restore(self, state, self.global_rank, self.trainer.world_size)

    # --- one training step: the README's data flow, in order -------------------------------------------
    def training_step(self, batch: dict[str, list[str]], batch_idx: int) -> None:
        if self._restored is not None:  # the first step after a resume: carry on with the saved randomness
            rng_state.restore_global(self._restored["global_rng"])
            self._restored = None
        if self.pending is None:
            self.pending = self._plan_rollout(batch)
        elif self.pending.prompts != batch["prompts"]:
            raise RuntimeError(
                "resume: the prompt stream did not replay the interrupted rollout's prompts; was the "
                "checkpoint written with another task or seed?"
            )
        plan = self.pending
        start = time.perf_counter()
        self._update(plan)
        plan.seconds[M.TIME_UPDATE] = plan.seconds.get(M.TIME_UPDATE, 0.0) + time.perf_counter() - start
        if plan.done:
            self._finish_rollout(plan)
            self.pending = None
        if self.global_step >= self.trainer.max_steps:
            # The final validation's figures, shown in the progress bar now (so it ends on the summary's
            # accuracy) and logged in on_train_end, after the end-of-training checkpoint.
            self.validation.final = self.evaluate()
            self.log("acc", self.validation.final[M.VAL_ACCURACY], prog_bar=True, logger=False)

    def on_train_end(self) -> None:
        self.finish_cut_rollout()
        if self.global_step >= self.trainer.max_steps:
            # The final validation, inside fit but after the end-of-training checkpoint: a resumed run drops
            # its rows with the others logged after the checkpoint, so none is logged twice. The weights
            # have not changed since the last step evaluated them.
            self.log_validation(prog_bar=False, figures=self.validation.final)
            self.validation.final = None

    def finish_cut_rollout(self) -> None:
        """Log the rollout that trainer.max_steps cut short, once the end-of-training checkpoint is written.

        The checkpoint keeps that rollout pending, so a resume with a larger max_steps finishes its steps as
        a longer run would have; this run logs its metrics now (a resume drops that row and logs it again).
        """
        if self.pending is not None and self.global_step >= self.trainer.max_steps:
            self._finish_rollout(self.pending, in_step=False)
            self.pending = None

    def _plan_rollout(self, batch: dict[str, list[str]]) -> UpdatePlan:
        """Sample, score and prepare one rollout: everything its optimizer steps need."""
        if self.rollouts_done % self.trainer_cfg.val_every == 0:
            self.log_validation()
        timer = StageTimer()
        with timer(M.TIME_ROLLOUT):
            rollout = self._rollout(batch["prompts"])
        prompts, answers = rollout.per_row(batch["prompts"]), rollout.per_row(batch["answers"])
        non_finite = None
        try:
            rewards, per_fn = self.rewards(
                prompts, rollout.completions, answers, rollout.truncated, rollout.completion_lengths
            )
        except NonFiniteRewardError as exc:
            # The rollout's steps are skipped (and counted); its advantages only need to exist.
            log.warning(
                "after optimizer step %d: %s; the rollout's optimizer steps are skipped",
                self.global_step,
                exc,
            )
            non_finite = "reward"
            rewards = torch.full((len(rollout.completions),), float("nan"))
            # Every reward function's column, so that every rank gathers the same columns.
            per_fn = {name: rewards.clone() for name in self.rewards.columns()}
        # Every rank computes the advantages of the global batch (its groups are whole, so only the
        # batch-level estimators, advantage=batch's std and REINFORCE++'s whitening, need the others' rows)
        # and trains on its own rows.
        everyone = RolloutRows(rewards, per_fn, rollout.completion_lengths, rollout.truncated).gathered()
        if non_finite is None and not torch.isfinite(everyone.rewards).all():
            non_finite = "reward"  # another rank's: every rank skips the same steps
        finite = torch.nan_to_num(everyone.rewards, nan=0.0, posinf=0.0, neginf=0.0)
        a = self.advantage_cfg
        settings = AdvantageSettings(scale=a.scale, eps=a.eps, positive_weight=a.positive_weight)
        adv = estimate(a.estimator, finite, rollout.group_size, everyone.lengths, settings)
        if non_finite is None and not torch.isfinite(adv.advantages).all():
            non_finite = "advantage"
        opt = self.optim_cfg
        n = rollout.input_ids.shape[0]
        plan = UpdatePlan(
            prompts=list(batch["prompts"]),
            answers=list(batch["answers"]),
            rollout=rollout,
            rewards=rewards,
            per_fn=per_fn,
            adv=adv,
            old_logps=rollout.old_logps,
            ref_logps=None,
            steps=shuffled_steps(n, opt.mu, opt.num_minibatches, self.generators.shuffler),
            non_finite=non_finite,
            reward_metrics=dict(self.rewards.last_metrics),
        )
        with timer(M.TIME_REFERENCE):
            plan.ref_logps = self._reference_logps(rollout, plan.prefixes)
        with timer(M.TIME_UPDATE):  # the old log-probs belong to the update's time
            if self._recompute_old_logps:  # in the update's mode, which recompute_old_logps sets
                # The first epoch's minibatches cover every row, in the first optimizer step's micro-batches.
                micro = opt.micro_batch_size or n
                first_epoch = plan.steps[: opt.num_minibatches]
                first_step_split = [part for rows in first_epoch for part in rows.split(micro)]
                plan.old_logps = recompute_old_logps(
                    self.policy, rollout, first_step_split, plan.prefixes, self.rollout_cfg.temperature
                )
        plan.seconds = dict(timer.seconds)
        return plan

    def _finish_rollout(self, plan: UpdatePlan, in_step: bool = True) -> None:
        """Log the rollout's own metrics at the step that ends its updates (every rank together)."""
        rollout = plan.rollout
        repeats = rollout_repeats_prompt(rollout)  # [N] bool, this rank's rows
        everyone = RolloutRows(
            plan.rewards,
            plan.per_fn,
            rollout.completion_lengths,
            rollout.truncated,
            rollout.filtered_mass,
            repeats_prompt=repeats,
        ).gathered()
        seconds = collectives.max_over_ranks(plan.seconds)  # the slowest rank's
        metrics = rollout_metrics(everyone, plan.adv, seconds, epochs=self.optim_cfg.mu)
        # What the reward functions counted (math: parse failures), over every rank's completions.
        metrics |= collectives.sum_over_ranks(plan.reward_metrics)
        if self.global_rank == 0:  # quoting rank 0's own completions
            texts = rollout.completions
            cut = [c for c, flag in zip(texts, rollout.truncated.tolist(), strict=True) if flag]
            self.truncation.observe(metrics[M.COMPLETION_CLIPPED_RATIO], self.global_step, cut)
            repeating = [c for c, flag in zip(texts, repeats.tolist(), strict=True) if flag]
            self.truncation.observe_repeats(
                metrics[M.COMPLETION_REPEATS_PROMPT_RATIO], self.global_step, repeating
            )
            keep_samples(  # samples.jsonl, when the run keeps one (tracking.samples_file)
                self.loggers,
                step=self.global_step,
                rollout=self.rollouts_done,
                prompts=rollout.per_row(plan.prompts),
                completions=texts,
                answers=rollout.per_row(plan.answers),
                rewards=plan.rewards,
                per_fn=plan.per_fn,
                advantages=plan.adv.advantages,
                lengths=rollout.completion_lengths,
                truncated=rollout.truncated,
                repeats=repeats,
                group_size=rollout.group_size,
                final=self.global_step >= self.trainer.max_steps,
            )
        log_metrics(self.loggers, metrics | {M.ROLLOUT_INDEX: float(self.rollouts_done)}, self.global_step)
        if in_step:  # the progress bar; Lightning refuses self.log outside a training step
            self.log("reward", metrics[M.REWARD_MEAN], prog_bar=True, logger=False)
        self.rollouts_done += 1
        if self.rollouts_done % self.trainer_cfg.samples_every == 0:
            prompts, answers = rollout.per_row(plan.prompts), rollout.per_row(plan.answers)
            rows = list(zip(prompts, rollout.completions, answers, plan.rewards.tolist(), strict=True))
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
                self._sampler_copy(self.policy),  # the policy, or its rollout.sampler_dtype copy
                self.tokenizer,
                prompts,
                SamplingOptions(
                    max_new_tokens=r.max_new_tokens,
                    group_size=r.group_size,
                    temperature=r.temperature,
                    top_k=r.top_k,
                    top_p=r.top_p,
                ),
                generator=self.generators.sampler,
                decoding=Decoding.auto(self.policy, self.device, r.cascade_attention),
            )

    @torch.no_grad()
    def _reference_logps(self, b: RolloutBatch, prefixes: PrefixIndex) -> torch.Tensor | None:
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
                prefix=prefixes.for_rows(None, self.device),
            )
        return logps

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # Lightning calls this after it unscales AMP (16-mixed) gradients, so the norm and the clipping see
        # the true gradients under every precision. The gradients are already averaged over the ranks (DDP)
        # or sharded (FSDP2, where the norm comes back as a replicated DTensor): the norm is the global one.
        max_norm = self.optim_cfg.max_grad_norm or float("inf")  # 0 or None: measure, do not clip
        norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), max_norm)
        self._grad_norm = collectives.full_value(norm)
        # Under 16-mixed an inf gradient is the loss scaler's business (it skips the step and scales down).
        if getattr(self.trainer.precision_plugin, "scaler", None) is None:
            self.nonfinite.watch("gradient", self._grad_norm)
        self._skipped_for = self.nonfinite.decide(
            lambda bad: self.trainer.strategy.reduce_boolean_decision(bad, all=False)
        )
        if self._skipped_for is not None:
            optimizer.zero_grad(set_to_none=True)  # the optimizer skips parameters without a gradient

    def _update(self, plan: UpdatePlan) -> None:
        """The plan's remaining optimizer steps, each logged at its own step.

        Stops at trainer.max_steps, so the last rollout runs only the steps left, and after any step when a
        stop is requested (a signal, too many non-finite steps), leaving the rest in `plan`.
        """
        micro = self.optim_cfg.micro_batch_size or plan.rollout.input_ids.shape[0]
        set_update_mode(self.policy, dropout=self.optim_cfg.update_dropout)  # keeps gradient checkpointing on
        while not plan.done and self.global_step < self.trainer.max_steps:
            rows = plan.steps[plan.next_step].split(micro)
            parts = [(part.to(self.device), plan.prefixes.for_rows(part, self.device)) for part in rows]
            stats = self._optimizer_step(plan, parts, sampler_gap=plan.next_step == 0)
            plan.next_step += 1
            log_metrics(self.loggers, stats, self.global_step)
            if self._stop_requested():
                self.trainer.should_stop = True
                return

    def _stop_requested(self) -> bool:
        """Whether any rank was asked to stop (decided together, so every rank stops after the same step)."""
        signum = signals.received()
        if signum is not None and self.stop_reason is None:
            self.stop_reason, self.stop_signal = f"{signals.name(signum)} received", signum
        if not self.trainer.strategy.reduce_boolean_decision(self.stop_reason is not None, all=False):
            return False
        # Every rank takes the first stopped rank's reason, so all of them end the run the same way.
        reasons = rng_state.gather_per_rank((self.stop_reason, self.stop_signal))
        self.stop_reason, self.stop_signal = next(r for r in reasons if r[0] is not None)
        return True

    def _optimizer_step(
        self, plan: UpdatePlan, parts: list[tuple[torch.Tensor, SharedPrefix | None]], sampler_gap: bool
    ) -> dict[str, float]:
        """One optimizer step on `parts` of the plan's rollout (its micro-batches: rows and their shared
        prompts, see `update_step`); returns the step's metrics."""
        optimizer = self.optimizers()
        optimizer.zero_grad(set_to_none=True)
        if plan.non_finite is not None:
            self.nonfinite.watch(plan.non_finite, True)
        stats = accumulate_gradients(
            self.policy,
            self.loss_fn,
            plan,
            parts,
            temperature=self.rollout_cfg.temperature,
            guard=self.nonfinite,
            backward=self.manual_backward,
            sampler_gap=sampler_gap,
            correction=self.optim_cfg.rollout_correction,
        )
        lr = self._lr()
        optimizer.step()  # clips, and skips a non-finite step, in on_before_optimizer_step
        self.lr_schedulers().step()
        if self.nonfinite.record(self.global_step, self._skipped_for) and self.stop_reason is None:
            self.stop_reason = self.nonfinite.stop_message(self.global_step)
        return stats.summary(self._grad_norm, lr) | {M.SKIPPED_STEPS: float(self.nonfinite.skipped)}

    # --- validation --------------------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        """Greedy decoding on the task's held-out set: exact-match accuracy and mean reward.

        Each rank decodes its share of the examples and the totals are summed, so every example counts once.
        """
        held_out = self.task.validation_set()
        buckets = length_buckets(held_out)
        with gathered(self.policy):
            totals = greedy_totals(
                self.policy,
                self.tokenizer,
                collectives.shard(held_out),
                self.rewards,
                max_new_tokens=self.rollout_cfg.max_new_tokens,
                batch_size=self.trainer_cfg.val_batch_size,
                buckets=buckets,
                completion_answer=self.task.completion_answer,
            )
        return validation_metrics(collectives.all_reduce(totals, "sum"), buckets)

    def log_validation(
        self, prog_bar: bool = True, figures: dict[str, float] | None = None
    ) -> dict[str, float]:
        """Evaluate on the held-out set (unless `figures` of these weights are given) and log at this step."""
        self.validation.record(figures or self.evaluate(), self.global_step)
        if self.rollouts_done == 0 and not self._startup_checked and self.global_rank == 0:
            self._startup_checked = True  # the validation before training: said once
            startup_truncation_warning(self.validation.last, self.rollout_cfg.max_new_tokens)
        log_metrics(self.loggers, self.validation.last, self.global_step)
        if prog_bar and self._trainer is not None and self.trainer.training:
            self.log("acc", self.validation.last[M.VAL_ACCURACY], prog_bar=True, logger=False)
        return self.validation.last
