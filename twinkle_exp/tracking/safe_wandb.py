"""A wandb logger that cannot take a run down: when wandb cannot start or write, the run goes on without it
(`fail_safe`): one warning, then wandb is left out for the rest of the run."""

from __future__ import annotations

from lightning.pytorch.loggers import WandbLogger

from twinkle_exp.tracking.fail_safe import FailSafe, guarded


class SafeWandbLogger(FailSafe, WandbLogger):
    """`WandbLogger` whose failures become a warning; `failure` says what went wrong (None: all well)."""

    tool = "wandb"

    log_metrics = guarded(WandbLogger.log_metrics)
    log_hyperparams = guarded(WandbLogger.log_hyperparams)
    log_table = guarded(WandbLogger.log_table)
    log_text = guarded(WandbLogger.log_text)
    save = guarded(WandbLogger.save)
    finalize = guarded(WandbLogger.finalize)
