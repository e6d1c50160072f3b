"""Lightning's rich progress bar, counting rollouts (one training batch each) instead of epochs."""

from __future__ import annotations

import math

from lightning.pytorch.callbacks import RichProgressBar


class RolloutProgressBar(RichProgressBar):
    """`trainer.max_steps` counts optimizer steps; the bar counts rollouts, `max_steps / updates_per_rollout`."""

    def __init__(self, updates_per_rollout: int) -> None:
        super().__init__()
        self.updates_per_rollout = updates_per_rollout

    @property
    def total_train_batches(self) -> int | float:
        return math.ceil(self.trainer.max_steps / self.updates_per_rollout)

    def _get_train_description(self, current_epoch: int) -> str:
        return "rollouts"

    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics
