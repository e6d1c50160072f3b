"""Dataclass schemas of every config group, registered in Hydra's ConfigStore.

Each YAML option under `conf/<group>/` starts from one of these schemas (its defaults list names
`/schema/<group>@_here_`), so a misspelt key, a value of the wrong type or a parameter of another loss fails at
start-up with Hydra's message naming it.

The groups of the training loop (rollout, advantage, optim, ...) are defined here and reach the code as
instances of these dataclasses (`typed_config`). Losses, tasks and policies are defined by their own classes
and factories, registered in `LOSSES`, `TASKS` and `POLICIES`; their schemas are derived from those
signatures (`derived_schema`), so a parameter and its default are written once.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from twinkle_exp.advantages import SCALES
from twinkle_exp.loss import LOSSES
from twinkle_exp.loss.params import (
    at_most,
    finite,
    int_at_least,
    non_negative,
    one_of,
    optional,
    param,
    positive,
    positive_int,
)
from twinkle_exp.policy import POLICIES
from twinkle_exp.tasks import TASKS

# Where the experiment's defaults differ from the library's: the classes default to no KL penalty, the
# experiment penalises it a little, so GRPO-style runs look like the papers'.
LOSS_EXPERIMENT_DEFAULTS = {"beta": 0.01}
OLD_LOGPS_MODES = ("auto", "recompute", "sampler")
WANDB_MODES = ("online", "offline", "disabled", "shared")
MAX_SEED = 2**32 - 1  # numpy's (and so Lightning's seed_everything's) range is 0..2**32 - 1


def seed_range(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ValueError(
            f"{name} must be an integer from 0 to {MAX_SEED} (numpy's seed range), got {value!r}"
        )
    return value


@dataclass
class RewardTermConfig:
    fn: Any = MISSING  # a Hydra node instantiating to fn(prompts, completions, answers) -> list[float]
    weight: float = 1.0


@dataclass
class RewardConfig:
    # {name: {fn: <Hydra node>, weight: float}}. Typed Any, not RewardTermConfig: Hydra cannot add a typed
    # entry from the command line (`+reward.functions.mine={fn: ..., weight: 0.5}`); the start-up check
    # validates each term and `__post_init__` types it.
    functions: dict[str, Any] = field(default_factory=dict)
    # The most a completion cut off at max_new_tokens without EOS can score; null: no cap.
    truncated_max: float | None = param(0.0, optional(finite))

    def __post_init__(self) -> None:
        self.functions = {
            name: term if isinstance(term, RewardTermConfig) else RewardTermConfig(**term)
            for name, term in self.functions.items()
        }


@dataclass
class RolloutConfig:
    prompts_per_step: int = param(
        16, positive_int
    )  # per rollout over all data-parallel ranks; each samples its share
    group_size: int = param(8, int_at_least(2))  # one sample per prompt has no group to compare against
    temperature: float = param(1.0, positive)
    top_k: int = param(0, int_at_least(0))  # 0: no top-k filter
    top_p: float = param(1.0, at_most(1.0, positive))
    max_new_tokens: int = param(8, positive_int)
    # Decode transformers models with cascade attention (each group's prompt read once, `cascade.py`).
    # null: on a CPU, where it was measured faster; off on a GPU, where it has not been measured yet.
    cascade_attention: bool | None = None


@dataclass
class AdvantageConfig:
    scale: str = param("group", one_of(SCALES))  # group | batch | none
    eps: float = param(1e-6, non_negative)


@dataclass
class OptimConfig:
    lr: float = param(1e-4, positive)
    weight_decay: float = param(0.0, non_negative)
    betas: tuple[float, float] = (0.9, 0.99)
    warmup_steps: int = param(0, int_at_least(0))  # linear learning-rate warm-up, in optimizer steps
    # On unscaled gradients; 0 or null: no clipping (as in TRL).
    max_grad_norm: float | None = param(1.0, optional(non_negative))
    mu: int = param(
        2, positive_int
    )  # epochs over each rollout: > 1 makes ratios leave 1, so clipping matters
    num_minibatches: int = param(2, positive_int)  # optimizer steps per epoch
    # Sequences per backward (gradient accumulation); None: the whole minibatch at once.
    micro_batch_size: int | None = param(None, optional(positive_int))
    # Where the loss's old log-probs come from: "recompute" them with the update's own forward (no grad,
    # before the first update of the rollout), keep the "sampler"'s, or "auto": recompute whenever the two
    # can differ numerically (16-bit precision or weights, TF32 matmuls, dropout, gradient checkpointing).
    old_logps: str = param("auto", one_of(OLD_LOGPS_MODES))
    # Apply the model's dropout in the update (train mode). Off by default, so an on-policy ratio is exactly 1.
    update_dropout: bool = False
    # A step with a non-finite reward, advantage, log-prob, loss or gradient is skipped (train/skipped_steps);
    # this many in a row stop the run with a checkpoint and a message naming the first non-finite quantity.
    max_skipped_steps: int = param(10, positive_int)


@dataclass
class WarmupConfig:
    enabled: bool = True
    # Short on purpose: RL should start from a policy that is right sometimes, not already converged.
    steps: int = param(80, int_at_least(0))
    batch_size: int = param(64, positive_int)
    lr: float = param(1e-3, positive)
    seed: int = param(
        0, seed_range
    )  # separate from the RL seed: every seed of a sweep starts from one policy
    cache_dir: str = "${oc.env:TWINKLE_CACHE,${oc.env:HOME,.}/.cache/twinkle_exp}"


@dataclass
class TrainerConfig:
    max_steps: int = param(400, int_at_least(0))  # optimizer steps (each rollout gives mu x num_minibatches)
    accelerator: str = "auto"
    devices: Any = 1  # per node
    num_nodes: int = 1
    strategy: str = "auto"  # Lightning's (auto, ddp, ...), or fsdp2 (FSDP2, trainer=fsdp)
    precision: str = "32-true"
    # Rollouts between greedy validations (also before the first and after the last).
    val_every: int = param(10, positive_int)
    val_batch_size: int = param(128, positive_int)
    samples_every: int = param(25, positive_int)  # rollouts between tables of sample completions in wandb
    enable_progress_bar: bool = True
    save_checkpoint: bool = True
    # Optimizer steps between checkpoints (written at the end of the rollout that reaches each multiple);
    # 0 or null: only at the end and when a signal or non-finite values stop the run. save_checkpoint=false
    # writes none at all, so a stopped run can only start again.
    checkpoint_every: int | None = param(100, optional(int_at_least(0)))


@dataclass
class LoggerConfig:
    wandb: bool = True
    project: str = "twinkle_exp"
    entity: str | None = None
    mode: str = param("${oc.env:WANDB_MODE,offline}", one_of(WANDB_MODES))  # offline unless the env says so
    job_type: str = "train"
    tags: list[str] = field(default_factory=list)


@dataclass
class Config:
    policy: Any = MISSING
    task: Any = MISSING
    reward: RewardConfig = MISSING
    rollout: RolloutConfig = MISSING
    advantage: AdvantageConfig = MISSING
    loss: Any = MISSING
    optim: OptimConfig = MISSING
    warmup: WarmupConfig = MISSING
    trainer: TrainerConfig = MISSING
    logger: LoggerConfig = MISSING
    seed: int = param(0, seed_range)
    sweep_name: str | None = None  # wandb group of a multirun; default: the sweep directory's name
    # auto: continue from the latest checkpoint in the run directory (none there: start; a finished run:
    # nothing to do); a path: from that checkpoint file or run directory; null: never resume.
    resume: str | None = "auto"


def import_path(target: Callable) -> str:
    """The dotted path Hydra's `_target_` names `target` by: its package's when the package exports it."""
    package = target.__module__.rsplit(".", 1)[0]
    try:
        exported = getattr(importlib.import_module(package), target.__name__, None) is target
    except ImportError:
        exported = False
    return f"{package if exported else target.__module__}.{target.__qualname__}"


def derived_schema(target: Callable, name: str, defaults: dict[str, Any] | None = None) -> type:
    """A dataclass schema with `_target_` and one typed field per keyword parameter of `target`.

    `target` is a class (its `__init__`, or a dataclass's fields) or a factory function; every parameter
    needs a type annotation, and one without a default is mandatory (`???`). `defaults` overrides defaults.
    """
    hints_of = target if dataclasses.is_dataclass(target) else getattr(target, "__init__", target)
    hints = typing.get_type_hints(hints_of) if isinstance(target, type) else typing.get_type_hints(target)
    checks = (
        {f.name: f.metadata for f in dataclasses.fields(target)} if dataclasses.is_dataclass(target) else {}
    )
    fields: list[tuple[str, Any, Any]] = [("_target_", str, field(default=import_path(target)))]
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
            name: derived_schema(cls, cls.__name__.removesuffix("Loss") + "Config", LOSS_EXPERIMENT_DEFAULTS)
            for name, cls in LOSSES.items()
        },
        "task": {name: derived_schema(cls, cls.__name__ + "Config") for name, cls in TASKS.items()},
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


def register_configs() -> None:
    """Store the schemas under `schema/<group>`; each `conf/<group>/<option>.yaml` extends one of them."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for group, schemas in option_schemas().items():
        for name, node in schemas.items():
            cs.store(group=f"schema/{group}", name=name, node=node)
    for group, node in TYPED_GROUPS.items():
        cs.store(group=f"schema/{group}", name="base", node=node)


# Groups whose options are classes or factories: they reach the code as resolved dicts for `instantiate`.
OPTION_GROUPS = ("policy", "task", "loss")


def typed_config(cfg: DictConfig) -> Config:
    """The composed config as a `Config`: the training loop's groups as their dataclasses, read by attribute.

    Check it first (`twinkle_exp.validation.check_config` does both).
    """
    typed = OmegaConf.to_object(cfg)
    return dataclasses.replace(
        typed, **{g: OmegaConf.to_container(cfg[g], resolve=True) for g in OPTION_GROUPS}
    )
