"""A logger that cannot take a run down: when its back end cannot start or write, the run goes on without it.

metrics.csv holds every metric whatever a dashboard does, so a dashboard's failure (no disk space for its files,
a dead service process, a rejected login online) costs the dashboard, not the run: one warning, then that
logger is left out for the rest of the run.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

log = logging.getLogger(__name__)


class FailSafe:
    """Mixin for a Lightning logger: `fail` turns an exception into one warning; `failure` says what went wrong
    (None: all well). `tool` names the back end in the warning."""

    tool = "the logger"
    failure: str | None = None

    def start(self) -> bool:
        """Start the back end's run now rather than at the first metric, so a failure shows before training."""
        try:
            self.experiment  # noqa: B018 (the property starts the run)
        except Exception as exc:
            self.fail("start", exc)
        return self.failure is None

    def fail(self, action: str, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = f"{action}: {type(exc).__name__}: {exc}"
            log.warning(
                "%s failed (%s); the run continues without %s, metrics.csv keeps every metric",
                self.tool,
                self.failure,
                self.tool,
            )


def guarded(method):
    """`method` of a FailSafe logger: does nothing once the logger failed; an exception makes it fail."""

    @functools.wraps(method)
    def call(self: FailSafe, *args: Any, **kwargs: Any) -> Any:
        if self.failure is not None:
            return None
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:  # whatever the back end raises: the run must not end because of it
            self.fail(method.__name__, exc)
            return None

    return call
