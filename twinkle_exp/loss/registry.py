"""The losses by name: every module under `twinkle_exp/loss/objectives/` and the user's own register theirs.

    @register_loss
    class MyLoss(PolicyGradientLoss):      # one file: its parameters, metric keys, clip sides and objective
        name = "mine"
        ...

`losses()` imports the built-in objective modules, then each module named in the environment variable
`TWINKLE_EXP_PLUGINS` (comma-separated, importable from `sys.path`; `twinkle_exp.plugins`, the one pattern of
every plug-in kind), and returns the table. Everything that
lists the losses (Hydra's `loss` group, `--help`, the zoo sweep, the docs' checks) reads it, so a loss is
added in one place. This module imports neither torch nor the losses until `losses()` is called.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from twinkle_exp import plugins

BUILTIN_PACKAGE = "twinkle_exp.loss.objectives"
PUBLIC_PACKAGE = "twinkle_exp.loss"  # where the built-in classes are found by name (`_target_`)

LOSSES: dict[str, type] = {}  # name -> loss class, in registration order; filled by `losses()`


def _refuse_unknown_parameters(cls: type) -> None:
    """Wrap the dataclass `__init__` so an unknown keyword is a ValueError that lists the valid ones."""
    generated = cls.__init__
    names = [f.name for f in dataclasses.fields(cls)]

    @functools.wraps(generated)
    def __init__(self, **params: Any) -> None:
        unknown = sorted(set(params) - set(names))
        if unknown:
            raise ValueError(
                f"{cls.__name__} got unknown parameter(s) {unknown}; valid parameters: {sorted(names)}"
            )
        generated(self, **params)

    cls.__init__ = __init__


def loss_dataclass(cls: type) -> type:
    """`cls` as a frozen keyword-only dataclass that refuses unknown parameters by name (not registered:
    for a family's shared base)."""
    cls = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    _refuse_unknown_parameters(cls)
    return cls


def register_loss(cls: type) -> type:
    """Class decorator: make `cls` a checked frozen dataclass and register it under `cls.name`."""
    if not isinstance(cls.__dict__.get("name"), str):
        raise TypeError(f"{cls.__name__} needs a class attribute `name`, the name of its `loss=` option")
    if cls.name in LOSSES:
        raise ValueError(f"a loss named {cls.name!r} is already registered ({LOSSES[cls.name].__name__})")
    owner = next((k for k in cls.__mro__ if "per_token" in k.__dict__), object)
    if owner.__mro__[1] is object:  # only the base's placeholder: nothing to optimise
        raise TypeError(f"{cls.__name__} needs a `per_token(self, spec, b, ratio)` method, its objective")
    cls = loss_dataclass(cls)
    LOSSES[cls.name] = cls
    return cls


def losses() -> dict[str, type]:
    """The registry, with the built-in objective modules and the user's plug-in modules imported."""
    plugins.load(BUILTIN_PACKAGE)
    return LOSSES


def get_loss_class(name: str) -> type:
    """The loss class registered under `name`."""
    table = losses()
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; choose one of {sorted(table)}") from None


def target_path(cls: type) -> str:
    """The dotted path Hydra's `_target_` names a loss class by: `twinkle_exp.loss.<Class>` for the built-in
    ones (the path every run directory so far records), the defining module's for a user's."""
    if cls.__module__.startswith(BUILTIN_PACKAGE + "."):
        return f"{PUBLIC_PACKAGE}.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"
