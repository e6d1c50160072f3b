"""The held-out figures a run has seen: before its first update, the latest, and the final one to log."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ValidationRecord:
    first: dict[str, float] = field(default_factory=dict)  # before the first update: the warm-start's figures
    last: dict[str, float] = field(default_factory=dict)
    last_step: int = -1  # the optimizer step `last` was taken at
    # The last training step's validation, shown in the progress bar at once and logged at train end (after
    # the end-of-training checkpoint, so that a resumed run drops it with the other rows logged after it).
    final: dict[str, float] | None = None

    def record(self, figures: dict[str, float], step: int) -> None:
        self.last, self.last_step = figures, step
        self.first = self.first or figures
