"""PolicyModule: Lightning's hooks around the RL step of `rl_step.py` (sample -> score -> plan -> update)."""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch

from twinkle_exp import metric_names as M
from twinkle_exp.config.schema import AdvantageConfig, OptimConfig, RolloutConfig, TrainerConfig
from twinkle_exp.lifecycle.nonfinite import NonFiniteGuard
from twinkle_exp.lifecycle.run_end import RunEnd
from twinkle_exp.loss import LossFn
from twinkle_exp.models.hf import set_update_mode
from twinkle_exp.models.lora import is_lora, trainable_parameters, trainable_state_dict
from twinkle_exp.parallel.sharding import shard_models
from twinkle_exp.policy.build import Policy
from twinkle_exp.rewards import RewardSet
from twinkle_exp.sampling.generate import RolloutBatch
from twinkle_exp.tasks import Task
from twinkle_exp.tasks.prompt_stream import FreshPrompts
from twinkle_exp.tracking.loggers import log_metrics, log_samples
from twinkle_exp.tracking.samples_logger import keep_samples
from twinkle_exp.training import rl_step, state
from twinkle_exp.training.optimizer import optimizer_and_schedule
from twinkle_exp.training.rollout_metrics import SAMPLE_COLUMNS, sample_rows, samples_file_fields
from twinkle_exp.training.staleness import CHECKPOINT_KEY as LAGGED_KEY
from twinkle_exp.training.step_parts import StepParts, sampled_with
from twinkle_exp.training.update_plan import UpdatePlan
from twinkle_exp.training.validation import Validation


def _via(holder: str, name: str) -> property:
    """`module.name`, kept in `module.holder` (the names that callers and tests read on the module)."""
    return property(
        lambda self: getattr(getattr(self, holder), name),
        lambda self, value: setattr(getattr(self, holder), name, value),
    )


class PolicyModule(L.LightningModule):
    """Trains `policy` with `loss_fn` against a frozen copy of its initial weights (when the loss has beta > 0).

    Batches are dicts of `prompts` and `answers`. Optimisation is manual: each batch is one rollout reused for
    `optim.mu` epochs of `optim.num_minibatches` optimizer steps, so `trainer.global_step` counts optimizer
    steps. Training can stop between any two of them (`end`: `RunEnd`); the rollout's remaining steps stay in
    `pending`, which a checkpoint holds (`TrainingState`), so a resumed run finishes them first.
    """

    tokenizer, rewards, loss_fn = (
        _via("parts", "tokenizer"),
        _via("parts", "rewards"),
        _via("parts", "loss_fn"),
    )
    rollout_cfg, optim_cfg = _via("parts", "rollout"), _via("parts", "optim")
    rollouts_done, pending = _via("state", "rollouts_done"), _via("state", "pending")
    validation, generators = _via("state", "validation"), _via("state", "generators")
    task = _via("validator", "task")

    def __init__(
        self, policy: Policy, task: Task, rewards: RewardSet, loss_fn: LossFn, *, rollout: RolloutConfig,
        advantage: AdvantageConfig, optim: OptimConfig, trainer: TrainerConfig, seed: int = 0,
        run_end: RunEnd | None = None,
    ):  # fmt: skip
        super().__init__()
        self.automatic_optimization = False
        self.policy = policy.model
        self.strict_loading = not is_lora(self.policy)  # a LoRA checkpoint may hold the adapters only
        self.seed, self.samples_every = seed, trainer.samples_every
        self.parts = StepParts.of(policy, rewards, loss_fn, rollout, advantage, optim)
        self.state = state.TrainingState(NonFiniteGuard(optim.max_skipped_steps))
        self.validator = Validation(task, rollout.max_new_tokens, trainer, self.state.validation)
        self.end = run_end  # None: the budget of the trainer that fits the module (tests build their own)
        self._checked: rl_step.GradientCheck | None = None  # the current optimizer step's gradient check

    def set_loss(self, loss_fn: LossFn) -> None:
        """Use `loss_fn` (e.g. a `twinkle_exp.loss.SAPOLoss`) for the updates; builds the reference if needed."""
        self.parts.use_loss(loss_fn, started=self.generators.sampler is not None)

    @property
    def reference(self) -> torch.nn.Module | None:
        """The reference model; with LoRA the policy itself, which the reference pass runs without adapters."""
        return None if self.parts.reference is None else self.parts.reference.model

    @property
    def stop_reason(self) -> str | None:
        return None if self.end is None else self.end.reason

    def configure_optimizers(self):
        scaler = getattr(self._trainer and self.trainer.precision_plugin, "scaler", None)
        optimizer, schedule = optimizer_and_schedule(
            trainable_parameters(self.policy), self.optim_cfg, scaler
        )
        return [optimizer], [schedule]

    def configure_model(self) -> None:
        shard_models(self.policy, self.reference, self.device_mesh)

    def setup(self, stage: str) -> None:
        self.parts.check_minibatches(self.trainer.world_size)
        self.end = RunEnd.for_trainer(self.end, self.trainer.max_steps)

    def on_fit_start(self) -> None:
        self.parts.start(self.device, self.trainer.precision)
        self.state.start(self.device, self.seed, self.global_rank)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Under LoRA only the adapters are trained: the checkpoint holds them, not the frozen base model.
        checkpoint["state_dict"] = trainable_state_dict(self.policy, checkpoint["state_dict"], "policy.")
        checkpoint[state.KEY] = self.state.state_dict()
        if self.rollout_cfg.staleness > 0:  # the lagged weights to sample from (training/staleness.py)
            checkpoint[LAGGED_KEY] = self.parts.lagged.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        rank, ranks, sampling = self.global_rank, self.trainer.world_size, sampled_with(self.rollout_cfg)
        self.state.load_state_dict(checkpoint[state.KEY], rank, ranks, sampling)
        self.parts.lagged.load_state_dict(checkpoint.get(LAGGED_KEY))

    # --- one training step: rl_step's stages, in order ---------------------------------------------------
    def training_step(self, batch: dict[str, list[str]], batch_idx: int) -> None:
        self.state.resume_randomness()
        if self.pending is None:
            self.validator.before_rollout(self)
            shuffler = self.generators.shuffler
            fresh = FreshPrompts(self.task, self.seed, self.global_rank, self.rollouts_done)
            self.pending = rl_step.new_rollout(
                self.parts, batch, self.global_step, self._rollout, shuffler, fresh
            )
        else:
            self.pending.check_replayed(batch["prompts"])
        plan, start = self.pending, time.perf_counter()
        self._update(plan)
        plan.seconds[M.TIME_UPDATE] = plan.seconds.get(M.TIME_UPDATE, 0.0) + time.perf_counter() - start
        if plan.done:
            self._finish_rollout(plan)
            self.pending = None
        if self.end.done(self.global_step):
            self.validator.at_last_step(self)

    def _rollout(self, prompts: list[str]) -> RolloutBatch:
        return rl_step.sample(self.parts, prompts, self.generators.sampler)

    def _update(self, plan: UpdatePlan) -> None:
        """The plan's optimizer steps until it or the budget is done, or a stop (a signal, too many
        non-finite steps) is voted, which leaves the rest in `plan`."""
        set_update_mode(self.policy, dropout=self.optim_cfg.update_dropout)  # keeps gradient checkpointing on
        checked, steps = (lambda: self._checked), (lambda: self.global_step)
        stepper = rl_step.Stepper(
            self.optimizers(), self.lr_schedulers(), self.manual_backward, checked, steps
        )
        if rl_step.optimizer_steps(self.parts, plan, stepper, self.state.nonfinite, self.end, self.loggers):
            self.trainer.should_stop = True

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # After Lightning unscales AMP (16-mixed) gradients, so the norm and the clipping see the true ones.
        amp, guard = getattr(self.trainer.precision_plugin, "scaler", None) is not None, self.state.nonfinite
        self._checked = rl_step.check_gradients(
            self.policy, optimizer, self.optim_cfg.max_grad_norm, guard, amp
        )

    def _finish_rollout(self, plan: UpdatePlan, in_step: bool = True) -> None:
        """Log the rollout's own metrics at the step that ends its updates (every rank together)."""
        metrics = rl_step.rollout_summary(self.parts, plan, self.global_step, quote=self.global_rank == 0)
        if self.global_rank == 0:  # samples.jsonl, when the run keeps one (tracking.samples_file)
            final = self.end.done(self.global_step)
            keep_samples(
                self.loggers, **samples_file_fields(plan, self.global_step, self.rollouts_done, final)
            )
        log_metrics(self.loggers, metrics | {M.ROLLOUT_INDEX: float(self.rollouts_done)}, self.global_step)
        if in_step:  # the progress bar; Lightning refuses self.log outside a training step
            self.log("reward", metrics[M.REWARD_MEAN], prog_bar=True, logger=False)
        self.rollouts_done += 1
        if self.rollouts_done % self.samples_every == 0:
            log_samples(self.loggers, SAMPLE_COLUMNS, sample_rows(plan), self.global_step)

    # --- the run's end ---------------------------------------------------------------------------------------
    def on_train_end(self) -> None:
        self.finish_cut_rollout()
        if self.end.done(self.global_step):
            self.validator.after_checkpoint(self)

    def finish_cut_rollout(self) -> None:
        """Log the rollout that the budget cut short once the end-of-training checkpoint (which keeps it
        pending, for a longer resumed run to finish) is written; a resume drops that row and logs it again."""
        if self.pending is not None and self.end.done(self.global_step):
            self._finish_rollout(self.pending, in_step=False)
            self.pending = None

    def log_validation(self, prog_bar: bool = True, figures: dict | None = None) -> dict[str, float]:
        return self.validator.log(self, prog_bar, figures)
