"""Non-finite values in an optimizer step: skip the step, count it, stop after too many in a row.

One NaN reward or inf log-prob would otherwise reach the weights through the gradient and ruin every later
step. A step whose reward, advantage, log-prob, loss or gradient is not finite leaves the weights and the
optimizer's state untouched; `optim.max_skipped_steps` consecutive skips mean the run cannot recover, and
it stops with a checkpoint of the last good weights and a message naming where it went wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

# In the order a step computes them: the first non-finite one is the cause, the later ones its consequence.
QUANTITIES = ("reward", "advantage", "log-prob", "loss", "gradient")


class NonFiniteError(RuntimeError):
    """The run stopped after `optim.max_skipped_steps` consecutive optimizer steps were skipped."""


class NonFiniteGuard:
    """Collects a step's finiteness checks without host syncs, then decides the step with one."""

    def __init__(self, max_consecutive: int) -> None:
        if max_consecutive < 1:
            raise ValueError(f"optim.max_skipped_steps must be >= 1, got {max_consecutive}")
        self.max_consecutive = max_consecutive
        self.skipped = 0  # every skipped step of the run (train/skipped_steps)
        self.consecutive = 0
        self.first: tuple[int, str] | None = None  # (step, quantity) that began the current streak
        self._checks: list[tuple[str, torch.Tensor]] = []

    def watch(self, quantity: str, values: torch.Tensor | bool) -> None:
        """Queue the check that every element of `values` (any shape) is finite; `True` marks it bad outright."""
        if quantity not in QUANTITIES:
            raise ValueError(f"unknown quantity {quantity!r}; one of {QUANTITIES}")
        bad = torch.tensor(values) if isinstance(values, bool) else ~torch.isfinite(values.detach()).all()
        self._checks.append((quantity, bad))

    def first_non_finite(self) -> str | None:
        """The first quantity (in QUANTITIES order) that was not finite this step, or None; clears the checks."""
        if not self._checks:
            return None
        # Gather the flags on the accelerator they were computed on, so reading them is one host sync.
        device = next((f.device for _, f in self._checks if f.device.type != "cpu"), torch.device("cpu"))
        bad = torch.stack([flag.to(device) for _, flag in self._checks]).tolist()
        names = {quantity for (quantity, _), is_bad in zip(self._checks, bad, strict=True) if is_bad}
        self._checks.clear()
        return next((q for q in QUANTITIES if q in names), None)

    def decide(self, any_rank: Callable[[bool], bool]) -> str | None:
        """Whether to skip this step (the first non-finite quantity, or None), agreed by every rank.

        `any_rank(flag)` is True when `flag` is True on any rank (Lightning's reduce_boolean_decision): every
        rank skips the step or none does, or the ranks' weights would part.
        """
        quantity = self.first_non_finite()
        if any_rank(quantity is not None):
            return quantity or "value on another rank"
        return None

    def record(self, step: int, quantity: str | None) -> bool:
        """Count optimizer step `step` as skipped for `quantity` (None: it was applied); True: stop the run."""
        if quantity is None:
            self.consecutive, self.first = 0, None
            return False
        self.skipped += 1
        self.consecutive += 1
        if self.first is None:
            self.first = (step, quantity)
        return self.consecutive >= self.max_consecutive

    def stop_message(self, step: int) -> str:
        first_step, quantity = self.first or (step, "unknown")
        return (
            f"stopped at optimizer step {step}: {self.consecutive} consecutive optimizer steps skipped for "
            f"non-finite values (optim.max_skipped_steps={self.max_consecutive}); the first was the {quantity} "
            f"at step {first_step}"
        )

    def state_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped, "consecutive": self.consecutive, "first": self.first}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.skipped, self.consecutive = state["skipped"], state["consecutive"]
        self.first = None if state["first"] is None else tuple(state["first"])
