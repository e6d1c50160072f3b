"""Each setting on its own: unknown keys, missing mandatory values, and the check its schema field declares.

A field's check is declared once, on its dataclass field (`param(default, check)`, `loss.params`): the
loop's groups (`config.schema`) and the classes of the loss, task and policy registries (their derived
schemas, `config.store.option_schemas`) alike.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from twinkle_exp.config.schema import Config, RewardTermConfig


def field_problems(schema: type, values: dict[str, Any], prefix: str) -> Iterator[str]:
    """Unknown keys, missing mandatory values and failed field checks of one group (`prefix`: its key)."""
    fields, nested = {f.name: f for f in dataclasses.fields(schema)}, nested_schemas(schema)
    for key in values:
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean '{prefix}.{close[0]}'?" if close else ""
            yield f"{prefix}.{key}: not a setting of {prefix}{hint} (valid: {', '.join(sorted(fields))})"
    for name, f in fields.items():
        value = values.get(name)
        if name in nested and isinstance(value, dict):
            yield from field_problems(nested[name], value, f"{prefix}.{name}")  # optim.rollout_correction.*
            continue
        if value == "???":
            yield f"{prefix}.{name} is mandatory: set it, e.g. {prefix}.{name}=<value>"
            continue
        if name in values:
            yield from _checked(f, f"{prefix}.{name}", value)


def top_level_problems(values: Mapping[str, Any]) -> Iterator[str]:
    """Failed checks of Config's own fields (seed=-1 would end in numpy's traceback)."""
    for f in dataclasses.fields(Config):
        if f.metadata.get("check") is not None and f.name in values:
            yield from _checked(f, f.name, values[f.name])


def _checked(f: dataclasses.Field, key: str, value: Any) -> Iterator[str]:
    check = f.metadata.get("check")
    if check is not None:
        try:
            check(key, value)
        except ValueError as exc:
            yield str(exc)


def nested_schemas(schema: type) -> dict[str, type]:
    """`{field: its dataclass}` for the fields of `schema` that are schemas themselves (the annotations are
    strings: `from __future__`, so they are resolved here)."""
    hints = typing.get_type_hints(schema)
    return {
        f.name: hints[f.name]
        for f in dataclasses.fields(schema)
        if isinstance(hints.get(f.name), type) and dataclasses.is_dataclass(hints[f.name])
    }


def reward_problems(reward: dict[str, Any]) -> Iterator[str]:
    """Each reward term's shape (its schema is Any, so that `+reward.functions.<name>=...` can add one)."""
    allowed = {f.name for f in dataclasses.fields(RewardTermConfig)}
    for name, term in (reward.get("functions") or {}).items():
        where = f"reward.functions.{name}"
        if not isinstance(term, dict) or set(term) - allowed or not isinstance(term.get("fn"), dict):
            yield f"{where}={term!r}: expected {{fn: {{_target_: module.function, ...}}, weight: <number>}}"
        elif "_target_" not in term["fn"]:
            yield f"{where}.fn needs a _target_ naming the function (fn(prompts, completions, answers))"
        elif isinstance(term.get("weight", 1.0), bool) or not isinstance(
            term.get("weight", 1.0), (int, float)
        ):
            yield f"{where}.weight={term['weight']!r}: must be a number"
    if not reward.get("functions"):
        yield "reward.functions is empty: pick a reward (reward=exact) or add one (+reward.functions.<name>=...)"
