"""Dataclass schemas of every config group, registered in Hydra's ConfigStore.

Each YAML option under `conf/<group>/` starts from one of these schemas (its defaults list names
`/schema/<group>@_here_`), so a misspelt key, a value of the wrong type or a parameter of another loss fails at
start-up with Hydra's message naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException


# --- loss: one schema per class, so `loss.tau=0.5` with `loss=grpo` is refused -------------------------
@dataclass
class LossConfig:
    _target_: str = MISSING
    clip_range: float = 0.2
    clip_range_high: float | None = None  # None: same as clip_range
    beta: float = 0.01
    kl_estimator: str = "k3"


# One class per loss, so Hydra's message names the loss: "Key 'tau' not in 'GRPOConfig'".
@dataclass
class GRPOConfig(LossConfig):
    _target_: str = "twinkle_exp.loss.GRPOLoss"


@dataclass
class GSPOConfig(LossConfig):
    _target_: str = "twinkle_exp.loss.GSPOLoss"


@dataclass
class CISPOConfig(LossConfig):
    _target_: str = "twinkle_exp.loss.CISPOLoss"


@dataclass
class BNPOConfig(LossConfig):
    _target_: str = "twinkle_exp.loss.BNPOLoss"


@dataclass
class SAPOConfig(LossConfig):
    _target_: str = "twinkle_exp.loss.SAPOLoss"
    tau: float = 1.0
    tau_pos: float | None = None
    tau_neg: float | None = None


@dataclass
class DRGRPOConfig(LossConfig):
    _target_: str = "twinkle_exp.loss.DRGRPOLoss"
    max_completion_length: int = II("rollout.max_new_tokens")


# --- the rest of the data flow ------------------------------------------------------------------------
@dataclass
class PolicyConfig:
    _target_: str = MISSING  # a factory returning twinkle_exp.policy.Policy


@dataclass
class TinyPolicyConfig(PolicyConfig):
    _target_: str = "twinkle_exp.policy.tiny_policy"
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    max_seq_len: int = 64
    dropout: float = 0.0


@dataclass
class HFPolicyConfig(PolicyConfig):
    _target_: str = "twinkle_exp.policy.hf_policy"
    name_or_path: str = MISSING  # a local directory or a hub id
    dtype: str = "float32"
    trust_remote_code: bool = False


@dataclass
class TaskConfig:
    _target_: str = MISSING  # a twinkle_exp.tasks.Task
    seed: int = 0  # fixes the held-out set, the same for every RL seed
    num_validation: int = 128


@dataclass
class AdditionTaskConfig(TaskConfig):
    _target_: str = "twinkle_exp.tasks.AdditionTask"
    min_digits: int = 1
    max_digits: int = 2


@dataclass
class ReverseTaskConfig(TaskConfig):
    _target_: str = "twinkle_exp.tasks.ReverseTask"
    min_len: int = 3
    max_len: int = 6
    alphabet: str = "abcdefgh"


@dataclass
class SortDigitsTaskConfig(TaskConfig):
    _target_: str = "twinkle_exp.tasks.SortDigitsTask"
    min_len: int = 3
    max_len: int = 6


@dataclass
class JsonlTaskConfig(TaskConfig):
    _target_: str = "twinkle_exp.tasks.JsonlTask"
    path: str = MISSING
    validation_path: str | None = None
    num_validation: int = 64


@dataclass
class RewardTermConfig:
    fn: Any = MISSING  # a Hydra node instantiating to fn(prompts, completions, answers) -> list[float]
    weight: float = 1.0


@dataclass
class RewardConfig:
    functions: dict[str, RewardTermConfig] = field(default_factory=dict)


@dataclass
class RolloutConfig:
    prompts_per_step: int = 16
    group_size: int = 8
    temperature: float = 1.0
    top_k: int = 0  # 0: no top-k filter
    top_p: float = 1.0
    max_new_tokens: int = 8


@dataclass
class AdvantageConfig:
    scale: str = "group"  # group | batch | none
    eps: float = 1e-6


@dataclass
class OptimConfig:
    lr: float = 1e-4
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.99)
    warmup_steps: int = 0  # linear learning-rate warm-up, in optimizer steps
    max_grad_norm: float = 1.0
    mu: int = 2  # epochs over each rollout: > 1 makes ratios leave 1, so clipping matters
    num_minibatches: int = 2  # optimizer steps per epoch
    # Sequences per backward (gradient accumulation); None: the whole minibatch at once.
    micro_batch_size: int | None = None


@dataclass
class WarmupConfig:
    enabled: bool = True
    # Short on purpose: RL should start from a policy that is right sometimes, not already converged.
    steps: int = 80
    batch_size: int = 64
    lr: float = 1e-3
    seed: int = 0  # separate from the RL seed, so every seed of a sweep starts from the same policy
    cache_dir: str = "${oc.env:TWINKLE_CACHE,${oc.env:HOME,.}/.cache/twinkle_exp}"


@dataclass
class TrainerConfig:
    max_steps: int = 400  # optimizer steps (each rollout gives mu x num_minibatches of them)
    accelerator: str = "auto"
    devices: Any = 1
    strategy: str = "auto"
    precision: str = "32-true"
    val_every: int = 10  # rollouts between greedy validations (also before the first and after the last)
    val_batch_size: int = 128
    samples_every: int = 25  # rollouts between tables of sample completions in wandb
    enable_progress_bar: bool = True
    save_checkpoint: bool = True


@dataclass
class LoggerConfig:
    wandb: bool = True
    project: str = "twinkle_exp"
    entity: str | None = None
    mode: str = "${oc.env:WANDB_MODE,offline}"  # offline unless the environment says otherwise
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
    seed: int = 0
    sweep_name: str | None = None  # wandb group of a multirun; default: the sweep directory's name


LOSS_SCHEMAS = {
    "grpo": GRPOConfig,
    "gspo": GSPOConfig,
    "sapo": SAPOConfig,
    "cispo": CISPOConfig,
    "bnpo": BNPOConfig,
    "drgrpo": DRGRPOConfig,
}


TASK_SCHEMAS = {
    "addition": AdditionTaskConfig,
    "reverse": ReverseTaskConfig,
    "sort_digits": SortDigitsTaskConfig,
    "jsonl": JsonlTaskConfig,
}


# Groups whose options all share one schema; check_config re-validates them after the overrides.
_TYPED_GROUPS = {
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
    for name, node in LOSS_SCHEMAS.items():
        cs.store(group="schema/loss", name=name, node=node)
    cs.store(group="schema/policy", name="tiny", node=TinyPolicyConfig)
    cs.store(group="schema/policy", name="hf", node=HFPolicyConfig)
    for name, node in TASK_SCHEMAS.items():
        cs.store(group="schema/task", name=name, node=node)
    for group, node in _TYPED_GROUPS.items():
        cs.store(group=f"schema/{group}", name="base", node=node)


def check_config(cfg: DictConfig) -> None:
    """Refuse keys the schemas do not know, including ones added with Hydra's `+key=value`.

    Hydra's struct mode already refuses `trainer.bogus=1`; `+trainer.bogus=1` gets past it, and would be
    silently ignored. Loss, task and policy options reject unknown keys when they are instantiated.
    """
    for group, schema in _TYPED_GROUPS.items():
        try:
            OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.to_container(cfg[group], resolve=False))
        except OmegaConfBaseException as exc:
            raise ValueError(
                f"config group '{group}': {exc.msg} (full key: {group}.{exc.full_key})"
            ) from None
