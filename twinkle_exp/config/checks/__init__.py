"""Start-up checks of the composed config, by kind: every problem, one line each, before anything is built.

Each line names the key, the value, and what is allowed or what to do. The kinds, in the order they run:
- `overrides`: the command line's top-level keys, before Hydra composes it;
- `fields`: each setting on its own (unknown keys, mandatory values, the check its schema field declares);
- `relations`: settings against each other, as the schemas declare them (`config.schema.Related`);
- `environment`: what the machine has (a GPU, the policy's model file, a wandb login);
- `built`: the rewards, the loss, the task and the built-in policy, built, and the task's examples against
  the policy and the reward (`examples`).
Relations, environment and built objects are checked once every setting is in range. Lightning is not
imported, so a bad setting is reported within seconds. `caveats`: settings that run but bend what the
metrics mean, logged.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from twinkle_exp.config.checks.built import built_problems
from twinkle_exp.config.checks.caveats import config_caveats
from twinkle_exp.config.checks.environment import environment_problems
from twinkle_exp.config.checks.fields import field_problems, reward_problems, top_level_problems
from twinkle_exp.config.checks.overrides import known_top_level, override_problems, unknown_top_level
from twinkle_exp.config.checks.relations import relation_problems
from twinkle_exp.config.schema import Config
from twinkle_exp.config.store import OPTION_GROUPS, TYPED_GROUPS, option_schemas, typed_config

__all__ = ["check_config", "config_problems", "override_problems"]

log = logging.getLogger(__name__)


def config_problems(cfg: DictConfig) -> list[str]:
    """Every problem of the composed `cfg`, one line each; empty when it can run."""
    fields = {f.name for f in dataclasses.fields(Config)}
    problems = [f"+{key}: {unknown_top_level(key, known_top_level())}" for key in cfg if key not in fields]
    problems += top_level_problems(cfg)
    plain: dict[str, Any] = {}
    for group in [*TYPED_GROUPS, *OPTION_GROUPS]:
        try:
            plain[group] = OmegaConf.to_container(cfg[group], resolve=True, throw_on_missing=False)
        except OmegaConfBaseException as exc:
            problems.append(f"{group}: {exc.msg}")
    for group, schema in TYPED_GROUPS.items():
        if group in plain and group != "reward":
            problems += field_problems(schema, plain[group], group)
    schemas = option_schemas()
    chosen = {group: _registered(schemas[group], plain.get(group, {})) for group in OPTION_GROUPS}
    for group, name in chosen.items():
        if name is not None:
            problems += field_problems(schemas[group][name], plain[group], group)
    if "reward" in plain:
        problems += reward_problems(plain["reward"])
    if not problems:  # relations, the machine and the built objects need every value in range
        problems += relation_problems(Config, plain)
        problems += environment_problems(plain, chosen["policy"])
        problems += built_problems(cfg, plain, chosen)
    return problems


def _registered(schemas: dict[str, type], node: dict[str, Any]) -> str | None:
    """The registry's name of the class or factory `node["_target_"]` names; None: one of the user's own."""
    target = node.get("_target_")
    return next((name for name, schema in schemas.items() if schema._target_ == target), None)  # type: ignore[attr-defined]


def check_config(cfg: DictConfig) -> Config:
    """The composed config as a typed `Config`, or ValueError listing every problem (one per line)."""
    problems = config_problems(cfg)
    if problems:
        raise ValueError("\n".join(problems))
    config = typed_config(cfg)
    for line in config_caveats(config):
        log.warning(line)
    return config
