"""Parameter checks: each dataclass field names its check once, in its metadata.

    tau: float = param(1.0, positive)

`PolicyGradientLoss.__post_init__` runs every field's check, so a loss's parameters, their defaults and their
checks live in the class alone; the Hydra schema is derived from the same fields (`twinkle_exp.config.schema`).
The experiment's config groups use the same checks, run at start-up over the composed config
(`twinkle_exp.config.checks`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import field
from typing import Any

Check = Callable[[str, Any], Any]  # (name, value) -> the value to store, or ValueError naming `name`


def param(default: Any, check: Check | None = None) -> Any:
    """A dataclass field with `default` whose value `check` validates (and may normalise) at construction."""
    return field(default=default, metadata={"check": check})


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def finite(name: str, value: Any) -> float:
    return _number(name, value)


def positive(name: str, value: Any) -> float:
    value = _number(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value:g}")
    return value


def non_negative(name: str, value: Any) -> float:
    value = _number(name, value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value:g}")
    return value


def positive_int(name: str, value: Any) -> int:
    return int_at_least(1)(name, value)


def int_at_least(low: int) -> Check:
    def checked(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            what = "a positive integer" if low == 1 else f"an integer >= {low}"
            raise ValueError(f"{name} must be {what}, got {value!r}")
        return value

    return checked


def at_most(high: float, check: Check) -> Check:
    """`check`, and the value must not exceed `high`."""

    def checked(name: str, value: Any) -> Any:
        value = check(name, value)
        if value > high:
            raise ValueError(f"{name} must be <= {high:g}, got {value:g}")
        return value

    return checked


def optional(check: Check) -> Check:
    """`check`, but None passes through (meaning "not set": the class decides what that stands for)."""

    def checked(name: str, value: Any) -> Any:
        return None if value is None else check(name, value)

    return checked


def one_of(choices: Sequence[str] | Callable[[], Sequence[str]]) -> Check:
    """`choices`, or a function that returns them when a value is checked (a registry that plug-ins extend)."""

    def checked(name: str, value: Any) -> str:
        allowed = choices() if callable(choices) else choices
        if value not in allowed:
            raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
        return value

    return checked


def boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


def greater_than(low: float) -> Check:
    """A finite number strictly above `low`."""

    def checked(name: str, value: Any) -> float:
        value = _number(name, value)
        if value <= low:
            raise ValueError(f"{name} must be > {low:g}, got {value:g}")
        return value

    return checked


def fraction(name: str, value: Any) -> float:
    """A number in (0, 1]."""
    value = _number(name, value)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value:g}")
    return value
