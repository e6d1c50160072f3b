"""The Hydra ConfigStore: the loop's schemas, and those derived from the registries of losses, tasks, policies.

A loss, task or policy is defined by its own class or factory; its schema is derived from that signature
(`derived_schema`), so a parameter and its default are written once. A loss's `loss=<name>` option is
its schema itself (no yaml): the loss registry, with the plug-in modules `TWINKLE_EXP_PLUGINS` names
(`twinkle_exp.plugins`), is the one list of losses; so is the task registry for a task with no yaml of its
own (the user's), and the estimators' registry for `advantage=<name>`. Importing this module imports the registries, which import torch but neither Lightning nor
transformers (those load when a stage is built).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.resources
import inspect
import typing
from collections.abc import Callable
from dataclasses import field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from twinkle_exp.config.schema import (
    LOSS_EXPERIMENT_DEFAULTS,
    AdvantageConfig,
    Config,
    LoggerConfig,
    OptimConfig,
    RewardConfig,
    RolloutConfig,
    TrainerConfig,
    WarmupConfig,
)
from twinkle_exp.loss.advantages import estimators
from twinkle_exp.loss.registry import losses, target_path
from twinkle_exp.policy.build import POLICIES
from twinkle_exp.tasks import tasks


def import_path(target: Callable) -> str:
    """The dotted path Hydra's `_target_` names `target` by: its package's when the package exports it."""
    package = target.__module__.rsplit(".", 1)[0]
    try:
        exported = getattr(importlib.import_module(package), target.__name__, None) is target
    except ImportError:
        exported = False
    return f"{package if exported else target.__module__}.{target.__qualname__}"


def derived_schema(
    target: Callable, name: str, defaults: dict[str, Any] | None = None, path: str | None = None
) -> type:
    """A dataclass schema with `_target_` and one typed field per keyword parameter of `target`.

    `target` is a class (its `__init__`, or a dataclass's fields) or a factory function; every parameter
    needs a type annotation, and one without a default is mandatory (`???`). `defaults` overrides defaults;
    `path` the `_target_` (default: `import_path(target)`).
    """
    hints_of = target if dataclasses.is_dataclass(target) else getattr(target, "__init__", target)
    hints = typing.get_type_hints(hints_of) if isinstance(target, type) else typing.get_type_hints(target)
    checks = (
        {f.name: f.metadata for f in dataclasses.fields(target)} if dataclasses.is_dataclass(target) else {}
    )
    fields: list[tuple[str, Any, Any]] = [("_target_", str, field(default=path or import_path(target)))]
    for p in inspect.signature(target).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name not in hints:
            raise TypeError(f"{import_path(target)}: parameter {p.name!r} needs a type annotation")
        default = (defaults or {}).get(p.name, p.default)
        if default is p.empty:
            default = MISSING
        metadata = checks.get(p.name, {})
        if isinstance(default, (list, dict)):
            factory = lambda d=default: d.copy()  # noqa: E731
            fields.append((p.name, hints[p.name], field(default_factory=factory, metadata=metadata)))
        else:
            fields.append((p.name, hints[p.name], field(default=default, metadata=metadata)))
    return dataclasses.make_dataclass(name, fields)


def option_schemas() -> dict[str, dict[str, type]]:
    """`{group: {option: schema}}` for the groups whose options are classes or factories of their own."""
    return {
        "loss": {
            # "GRPOConfig", so Hydra's message names the loss: "Key 'tau' not in 'GRPOConfig'".
            name: derived_schema(
                cls,
                cls.__name__.removesuffix("Loss") + "Config",
                {**LOSS_EXPERIMENT_DEFAULTS, **cls.config_defaults},
                target_path(cls),
            )
            for name, cls in losses().items()
        },
        "task": {name: derived_schema(cls, cls.__name__ + "Config") for name, cls in tasks().items()},
        "policy": {
            name: derived_schema(fn, f"{name.capitalize()}PolicyConfig") for name, fn in POLICIES.items()
        },
    }


# Groups whose options all share one schema (validation re-checks them: `+group.key=...` gets past Hydra).
TYPED_GROUPS = {
    "reward": RewardConfig,
    "rollout": RolloutConfig,
    "advantage": AdvantageConfig,
    "optim": OptimConfig,
    "warmup": WarmupConfig,
    "trainer": TrainerConfig,
    "logger": LoggerConfig,
}


# Groups whose options are their schemas, with no yaml of their own: the registry is their one source.
STORED_GROUPS = ("loss",)


def _has_yaml(group: str, name: str) -> bool:
    """Whether conf/<group>/<name>.yaml exists (a task's yaml sets its held-out set and recipe; a task of the
    user's own with none is an option of its own, its class's defaults)."""
    return (importlib.resources.files("twinkle_exp.conf") / group / f"{name}.yaml").is_file()


LOSS_NAMES_RESOLVER = "twinkle_losses"  # `${twinkle_losses:}`: the registered losses, comma-separated


def register_configs() -> None:
    """Store the schemas under `schema/<group>`; each `conf/<group>/<option>.yaml` extends one of them, and
    each loss (from the registry, `TWINKLE_EXP_LOSSES` included) is a `loss` option of its own."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for group, schemas in option_schemas().items():
        for name, node in schemas.items():
            cs.store(group=f"schema/{group}", name=name, node=node)
            if group in STORED_GROUPS or (group == "task" and not _has_yaml(group, name)):
                cs.store(group=group, name=name, node=node)
    for group, node in TYPED_GROUPS.items():
        cs.store(group=f"schema/{group}", name="base", node=node)
    # `advantage=<estimator>` for every registered estimator but group_relative, whose three scales are the
    # yaml files conf/advantage/{group,batch,unscaled}.yaml.
    for name in estimators():
        if name != "group_relative":
            cs.store(group="advantage", name=name, node=AdvantageConfig(estimator=name))
    # The zoo sweep's list of losses (conf/sweep/zoo.yaml).
    # A loss that reads each call's groups (GVPO) needs optim.minibatch_split=groups, which a sweep over the
    # other losses does not set: it runs with its recipe (+experiment=gvpo_paper), not in the zoo's grid.
    OmegaConf.register_new_resolver(
        LOSS_NAMES_RESOLVER,
        lambda: ",".join(name for name, cls in losses().items() if not cls.whole_groups),
        replace=True,
    )


# Groups whose options are classes or factories: they reach the code as resolved dicts for `instantiate`.
OPTION_GROUPS = ("policy", "task", "loss")


def typed_config(cfg: DictConfig) -> Config:
    """The composed config as a `Config`: the training loop's groups as their dataclasses, read by attribute.

    Check it first (`twinkle_exp.config.checks.check_config` does both).
    """
    typed = OmegaConf.to_object(cfg)
    return dataclasses.replace(
        typed, **{g: OmegaConf.to_container(cfg[g], resolve=True) for g in OPTION_GROUPS}
    )
