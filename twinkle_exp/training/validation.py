"""Every held-out validation of a run, in one place.

A run validates (greedy decoding, exact-match accuracy and mean reward) before its first rollout and every
`trainer.val_every` rollouts after it (`before_rollout`), at its last training step (`at_last_step`: shown
in the progress bar at once, logged by `after_checkpoint` once the end-of-training checkpoint is written,
so that a resumed run drops that row with the others logged after the checkpoint and none is logged
twice), and `final_figures` gives the run's result, validating once more unless the last step did.

With `trainer.val_samples.n` > 0 the validation before training, the last one and every
`val_samples.every`-th one between also sample n completions per prompt (val/pass@k, val/mean@n) from a
generator of their own, seeded by `val_samples.seed` and the rank, so the training's streams are untouched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from twinkle_exp import metric_names as M
from twinkle_exp.config.schema import TrainerConfig
from twinkle_exp.parallel import collectives
from twinkle_exp.parallel.sharding import gathered
from twinkle_exp.tasks import Task
from twinkle_exp.tracking.items_file import ITEMS_JSONL, ItemsFile
from twinkle_exp.tracking.loggers import log_metrics
from twinkle_exp.tracking.samples_logger import kept_run_dir
from twinkle_exp.training.evaluation import (
    greedy_totals,
    length_buckets,
    sampled_metrics,
    sampled_totals,
    startup_truncation_warning,
    validation_metrics,
)

# Mixed into the evaluation seed, so that val_samples.seed = s never draws the stream of the training's seed s.
EVAL_STREAM = 0x5A3D


@dataclass
class ValidationRecord:
    """The held-out figures a run has seen (part of `TrainingState`)."""

    first: dict[str, float] = field(default_factory=dict)  # before the first update: the warm-start's figures
    last: dict[str, float] = field(default_factory=dict)
    last_step: int = -1  # the optimizer step `last` was taken at
    final: dict[str, float] | None = None  # the last training step's, until it is logged

    def record(self, figures: dict[str, float], step: int) -> None:
        self.last, self.last_step = figures, step
        self.first = self.first or figures


class Validation:
    """Validates `module` (a `PolicyModule`: its policy, rewards, loggers, step and rollout count) on `task`."""

    def __init__(
        self, task: Task, max_new_tokens: int, trainer: TrainerConfig, record: ValidationRecord
    ) -> None:
        self.task, self.max_new_tokens = task, max_new_tokens
        self.every, self.batch_size = trainer.val_every, trainer.val_batch_size
        self.samples = trainer.val_samples
        self.record = record
        # items.jsonl beside samples.jsonl, when the run keeps that file (decided alike on every rank)
        self.keep_items = trainer.samples_file_rows > 0
        self._items: ItemsFile | None = None
        self._startup_checked = False  # whether the validation before training was checked for truncation

    def evaluate(self, module: Any, sampled: bool = False) -> dict[str, float]:
        """Each rank decodes its share of the held-out examples and the totals are summed, so every example
        counts once. `sampled`: also the sampled figures, when trainer.val_samples is on."""
        held_out = self.task.validation_set()
        buckets = length_buckets(held_out)
        share = collectives.shard(held_out)
        hits: list[float] = []
        draws: list[tuple[float, list[float]]] = []
        with gathered(module.policy):
            totals = greedy_totals(
                module.parts.sampler_copy.merged(module.policy),
                module.tokenizer,
                share,
                module.rewards,
                max_new_tokens=self.max_new_tokens,
                batch_size=self.batch_size,
                buckets=buckets,
                completion_answer=self.task.completion_answer,
                per_item=hits,
            )
            figures = validation_metrics(collectives.all_reduce(totals, "sum"), buckets)
            if sampled and self.samples.n > 0:
                figures.update(self._sampled(module, share, draws))
        if self.keep_items:
            self._keep_items(module, hits, draws)
        return figures

    def _keep_items(self, module: Any, hits: list[float], draws: list) -> None:
        """Every held-out prompt's result to items.jsonl (rank 0 writes; every rank's share gathered)."""
        shares = collectives.all_gather_object((hits, draws))
        if module.global_rank != 0:
            return
        run_dir = kept_run_dir(module.loggers) if self._items is None else None
        if self._items is None and run_dir is None:
            return  # no samples.jsonl logger (a test's module): no run directory to write to
        self._items = self._items or ItemsFile(run_dir / ITEMS_JSONL)
        world = len(shares)  # rank r holds items r, r + world, ... (collectives.shard)
        rows = sorted(
            (r + world * i, h, d)
            for r, (hs, ds) in enumerate(shares)
            for i, (h, d) in enumerate(zip(hs, ds or [None] * len(hs), strict=True))
        )
        sampled = bool(draws)
        self._items.write_validation(
            step=module.global_step,
            rollout=module.rollouts_done,
            item=[i for i, _, _ in rows],
            greedy=[h for _, h, _ in rows],
            sampled_mean=[d[0] for _, _, d in rows] if sampled else None,
            pass_at={k: [d[1][j] for _, _, d in rows] for j, k in enumerate(self.samples.resolved_ks())}
            if sampled
            else None,
        )

    def _sampled(self, module: Any, share: list, draws: list) -> dict[str, float]:
        started = time.perf_counter()
        device = next(module.policy.parameters()).device
        seed = np.random.SeedSequence([self.samples.seed, collectives.rank(), EVAL_STREAM])
        generator = torch.Generator(device).manual_seed(int(seed.generate_state(1)[0]))
        totals = sampled_totals(
            module.policy,
            module.tokenizer,
            share,
            module.rewards,
            self.samples,
            max_new_tokens=self.max_new_tokens,
            batch_size=self.batch_size,
            generator=generator,
            completion_answer=self.task.completion_answer,
            per_item=draws,
        )
        figures = sampled_metrics(collectives.all_reduce(totals, "sum"), self.samples)
        figures[M.TIME_VAL_SAMPLES] = time.perf_counter() - started
        return figures

    def _samples_now(self, module: Any) -> bool:
        """Whether the validation before this rollout samples: the first, and every `every`-th."""
        if module.rollouts_done == 0:
            return True
        k = self.samples.every
        return k > 0 and (module.rollouts_done // self.every) % k == 0

    def log(
        self,
        module: Any,
        prog_bar: bool = True,
        figures: dict[str, float] | None = None,
        sampled: bool = True,
    ) -> dict[str, float]:
        """Evaluate (unless `figures` of these weights are given) and log at the module's step."""
        self.record.record(figures or self.evaluate(module, sampled), module.global_step)
        if module.rollouts_done == 0 and not self._startup_checked and module.global_rank == 0:
            self._startup_checked = True  # the validation before training: said once
            startup_truncation_warning(self.record.last, self.max_new_tokens)
        log_metrics(module.loggers, self.record.last, module.global_step)
        if prog_bar and module._trainer is not None and module.trainer.training:
            module.log("acc", self.record.last[M.VAL_ACCURACY], prog_bar=True, logger=False)
        return self.record.last

    def before_rollout(self, module: Any) -> None:
        if module.rollouts_done % self.every == 0:
            self.log(module, sampled=self._samples_now(module))

    def at_last_step(self, module: Any) -> None:
        # Shown now, so that the progress bar ends on the summary's accuracy.
        self.record.final = self.evaluate(module, sampled=True)
        module.log("acc", self.record.final[M.VAL_ACCURACY], prog_bar=True, logger=False)

    def after_checkpoint(self, module: Any) -> None:
        # Inside fit, after the end-of-training checkpoint; the weights have not changed since the last step.
        self.log(module, prog_bar=False, figures=self.record.final)
        self.record.final = None

    def final_figures(self, module: Any) -> dict[str, float]:
        """The run's last figures; with max_steps=0 this is also its first validation."""
        step = module.global_step
        validated = self.record.last_step == step and step > 0
        return self.record.last if validated else self.log(module)
