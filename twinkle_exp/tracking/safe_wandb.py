"""A wandb logger that cannot take a run down: when wandb cannot start or write, the run goes on without it.

metrics.csv holds every metric whatever wandb does, so a wandb failure (no disk space for the offline run,
a dead wandb service process, a rejected login online) costs the dashboard, not the run: one warning, then
wandb is left out for the rest of the run.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from lightning.pytorch.loggers import WandbLogger

log = logging.getLogger(__name__)


def _guarded(method):
    @functools.wraps(method)
    def call(self: SafeWandbLogger, *args: Any, **kwargs: Any) -> Any:
        if self.failure is not None:
            return None
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:  # whatever wandb raises: the run must not end because of it
            self.fail(method.__name__, exc)
            return None

    return call


class SafeWandbLogger(WandbLogger):
    """`WandbLogger` whose failures become a warning; `failure` says what went wrong (None: all well)."""

    failure: str | None = None

    def start(self) -> bool:
        """Start the wandb run now rather than at the first metric, so a failure shows before training."""
        try:
            self.experiment  # noqa: B018 (the property calls wandb.init)
        except Exception as exc:
            self.fail("start", exc)
        return self.failure is None

    def fail(self, action: str, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = f"{action}: {type(exc).__name__}: {exc}"
            log.warning(
                "wandb failed (%s); the run continues without wandb, metrics.csv keeps every metric",
                self.failure,
            )

    log_metrics = _guarded(WandbLogger.log_metrics)
    log_hyperparams = _guarded(WandbLogger.log_hyperparams)
    log_table = _guarded(WandbLogger.log_table)
    log_text = _guarded(WandbLogger.log_text)
    save = _guarded(WandbLogger.save)
    finalize = _guarded(WandbLogger.finalize)
