"""Dataclass schemas of the training loop's config groups (rollout, advantage, optim, trainer, ...).

Each YAML option under `conf/<group>/` starts from one of these schemas (its defaults list names
`/schema/<group>@_here_`, stored by `config.store`), so a misspelt key or a value of the wrong type fails at
start-up with Hydra's message naming it. A setting's range is its field's check (`param(default, check)`);
a relation between settings is its schema's `relations` (`Related`). They reach the code as instances of
these dataclasses (`config.store.typed_config`). This module imports no stage of the pipeline: only the
parameter checks of the loss library, so that every stage can import its own config type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from omegaconf import MISSING

from twinkle_exp.loss.advantages import SCALES, estimators
from twinkle_exp.loss.params import (
    at_most,
    finite,
    greater_than,
    int_at_least,
    non_negative,
    one_of,
    optional,
    param,
    positive,
    positive_int,
)
from twinkle_exp.loss.rollout_correction import ROLLOUT_LEVELS, ROLLOUT_MODES

# Where the experiment's defaults differ from the library's: the classes default to no KL penalty, the
# experiment penalises it a little, so GRPO-style runs look like the papers'.
LOSS_EXPERIMENT_DEFAULTS = {"beta": 0.01}
OLD_LOGPS_MODES = ("auto", "recompute", "sampler")
MINIBATCH_SPLITS = ("rows", "groups")
SAMPLER_DTYPES = ("bfloat16", "float16")
WANDB_MODES = ("online", "offline", "disabled", "shared")
PREVIOUS_RUN_MODES = ("refuse", "move_aside")  # lifecycle/previous_run.py
MAX_SEED = 2**32 - 1  # numpy's (and so Lightning's seed_everything's) range is 0..2**32 - 1


class Related:
    """A schema whose settings constrain each other. `relations` (pure, on the plain values) names what is
    wrong, one line each; constructing the schema refuses it, and the start-up checks list every line."""

    @staticmethod
    def relations(values: Mapping[str, Any]) -> list[str]:
        return []

    def __post_init__(self) -> None:
        problems = self.relations(asdict(self))  # type: ignore[call-overload]
        if problems:
            raise ValueError("\n".join(problems))


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
    # DAPO's soft overlong punishment (rewards/overlong.py): a penalty rising linearly to `overlong_penalty`
    # over the last `overlong_buffer` tokens of rollout.max_new_tokens; 0 tokens: off.
    overlong_buffer: int = param(0, int_at_least(0))
    overlong_penalty: float = param(1.0, non_negative)

    def __post_init__(self) -> None:
        self.functions = {
            name: term if isinstance(term, RewardTermConfig) else RewardTermConfig(**term)
            for name, term in self.functions.items()
        }


@dataclass
class RolloutConfig:
    # Per rollout over all data-parallel ranks; each samples its share.
    prompts_per_step: int = param(16, positive_int)
    group_size: int = param(8, int_at_least(2))  # one sample per prompt has no group to compare against
    temperature: float = param(1.0, positive)
    top_k: int = param(0, int_at_least(0))  # 0: no top-k filter
    top_p: float = param(1.0, at_most(1.0, positive))
    max_new_tokens: int = param(8, positive_int)
    # Decode transformers models with cascade attention (each group's prompt read once, `cascade.py`).
    # null: on a CPU, where it was measured faster; off on a GPU, where it has not been measured yet.
    cascade_attention: bool | None = None
    # Sample from a copy of the policy in this dtype while the update keeps the policy's own: the
    # sampler / trainer mismatch of vLLM + an fp32 trainer, made on purpose (train/logp_mismatch/*
    # measures it; optim.rollout_correction corrects for it). null: sample from the policy itself.
    sampler_dtype: str | None = param(None, optional(one_of(SAMPLER_DTYPES)))
    # A LoRA policy samples from a plain copy with its adapters merged into the weights (one product per
    # layer; the same function up to float rounding, refreshed before every rollout; the adapted layers'
    # weights once more in memory). false: sample through the adapters.
    merge_adapters: bool = True
    # Dynamic sampling (DAPO, arXiv 2503.14476): drop the groups whose rewards are all equal (no signal under a
    # group baseline) and draw fresh prompts' groups in their place, at most max_extra_draws more sampling
    # passes per rollout; past that the rollout trains on what it has (training/dynamic_sampling.py).
    filter_zero_variance: bool = False
    max_extra_draws: int = param(4, int_at_least(1))
    # Sample (and recompute the old log-probs) with the policy of this many optimizer steps ago: the
    # stale rollouts of an asynchronous trainer, simulated with lagged copies of the trainable weights
    # (training/staleness.py). 0: the policy as it is.
    staleness: int = param(0, int_at_least(0))


@dataclass
class AdvantageConfig(Related):
    # Which estimator turns rewards into advantages (loss/advantages/: one file each). `advantage=group`,
    # `batch` and `unscaled` are group_relative at its three scales; the other options name an estimator.
    estimator: str = param("group_relative", one_of(lambda: tuple(estimators())))
    scale: str = param(
        "group", one_of(SCALES)
    )  # group | batch | none: group_relative's (passk: group | none)
    eps: float = param(1e-6, non_negative)
    positive_weight: float = param(0.1, positive)  # w_reinforce's lambda, the weight of correct samples
    # entropy_shaped: A + min(alpha * H_t, |A| / kappa) per token (arXiv 2506.14758); kappa > 1 keeps the sign
    entropy_alpha: float = param(0.4, positive)
    entropy_kappa: float = param(2.0, greater_than(1.0))

    @staticmethod
    def relations(c: Mapping[str, Any]) -> list[str]:
        """An estimator takes only the scales it defines (the others compare rewards without dividing)."""
        scales = estimators()[c["estimator"]].scales
        if c["scale"] not in scales:
            return [
                f"advantage.scale={c['scale']}: advantage.estimator={c['estimator']} takes "
                f"{' or '.join(scales)} (scale is group_relative's choice of divisor)"
            ]
        return []


@dataclass
class RolloutCorrectionConfig(Related):
    # Weights the policy term by pi_old / pi_sampler per token (loss/rollout_correction.py): none | tis
    # (truncated at `upper`) | mis (IcePop: tokens outside [low, high] dropped) | seq_mask (sequences whose
    # geometric-mean ratio leaves [low, high] dropped). Needs the recomputed old log-probs.
    mode: str = param("none", one_of(ROLLOUT_MODES))
    level: str = param("token", one_of(ROLLOUT_LEVELS))  # tis: per token, or the sequence's product
    upper: float = param(2.0, positive)
    low: float = param(0.5, non_negative)
    high: float = param(2.0, positive)

    @staticmethod
    def relations(c: Mapping[str, Any]) -> list[str]:
        """mis and seq_mask keep what lies in [low, high]: an empty range would drop every token. mis is per
        token: a sequence level would be silently ignored."""
        problems = []
        if c["mode"] in ("mis", "seq_mask") and c["low"] > c["high"]:
            problems.append(
                f"optim.rollout_correction.low={c['low']:g} > high={c['high']:g}: the kept range [low, high] is empty"
            )
        if c["mode"] == "mis" and c["level"] == "sequence":
            problems.append(
                "optim.rollout_correction.mode=mis is per token: level=sequence applies to tis only"
            )
        return problems


@dataclass
class OptimConfig(Related):
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
    # How an epoch is cut into minibatches: shuffled "rows", or shuffled whole "groups" (each minibatch then
    # holds fewer distinct prompts, so the update runs fewer prompt tokens: docs/performance.md).
    minibatch_split: str = param("rows", one_of(MINIBATCH_SPLITS))
    # Sequences per backward (gradient accumulation); None: the whole minibatch at once.
    micro_batch_size: int | None = param(None, optional(positive_int))
    # Where the loss's old log-probs come from: "recompute" them with the update's own forward (no grad,
    # before the first update of the rollout), keep the "sampler"'s, or "auto": recompute whenever the two
    # can differ numerically (16-bit precision or weights, TF32 matmuls, dropout, gradient checkpointing).
    old_logps: str = param("auto", one_of(OLD_LOGPS_MODES))
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    # Apply the model's dropout in the update (train mode). Off by default, so an on-policy ratio is exactly 1.
    update_dropout: bool = False
    # torch's fused AdamW kernel where it applies (plain float parameters on CPU or CUDA, no AMP loss
    # scaler): a faster optimizer step whose weights differ from the default loop's by float rounding,
    # so a run's figures can differ from the default's (training/optimizer.py).
    fused_adamw: bool = False
    # A step with a non-finite reward, advantage, log-prob, loss or gradient is skipped (train/skipped_steps);
    # this many in a row stop the run with a checkpoint and a message naming the first non-finite quantity.
    max_skipped_steps: int = param(10, positive_int)
    # Leave the rows whose advantage is exactly 0 (a group whose rewards all agree) out of the update's
    # forward and backward: they add nothing to the gradient of a loss that is `zero_advantage_inert` (no KL
    # term, no entropy bonus), so the weights are the same up to float rounding in fewer FLOPs. The losses'
    # normalisers still count every row; the step's metrics (entropy, ratios, clip shares) are over the rows
    # trained. One process only (data-parallel ranks must run the same passes).
    skip_zero_advantage: bool = False

    @staticmethod
    def relations(o: Mapping[str, Any]) -> list[str]:
        """The rollout correction weighs by pi_old / pi_sampler: the old log-probs must be the recomputed ones."""
        mode = o["rollout_correction"]["mode"]
        if mode != "none" and o["old_logps"] == "sampler":
            return [
                f"optim.rollout_correction.mode={mode} with optim.old_logps=sampler: the correction weighs by "
                "recomputed / sampler log-probs, so it needs them recomputed; use optim.old_logps=auto or recompute"
            ]
        return []


def whole_groups_problem(loss: Any, optim: Mapping[str, Any], group_size: int) -> str | None:
    """A loss that compares each sequence with its group (GVPO) needs every call to hold whole groups:
    minibatches of whole groups, micro-batches a multiple of the group size, groups of two or more."""
    if not getattr(type(loss), "whole_groups", False):
        return None
    name, micro = type(loss).name, optim.get("micro_batch_size")
    if group_size < 2:
        return f"loss={name} compares each sample with its group: rollout.group_size must be >= 2, got {group_size}"
    if optim.get("minibatch_split", "rows") != "groups":
        return f"loss={name} compares each sample with its group: set optim.minibatch_split=groups"
    if micro is not None and micro % group_size:
        return (
            f"loss={name} compares each sample with its group: optim.micro_batch_size={micro} must be a "
            f"multiple of rollout.group_size={group_size} (or null)"
        )
    return None


def skip_zero_advantage_problem(skip: bool, loss: Any, estimator: str) -> str | None:
    """Why optim.skip_zero_advantage=`skip` cannot run with the built `loss` and advantage.`estimator`, or None:
    rows of advantage 0 must add nothing to the gradient (`zero_advantage_inert`), and an estimator's per-token
    shaping could make their tokens' advantages non-zero."""
    if not skip:
        return None
    if not loss.zero_advantage_inert:
        return (
            f"optim.skip_zero_advantage=true with {type(loss).__name__}: rows whose advantage is 0 still reach "
            "its gradient (a KL term, beta > 0; an entropy bonus or quantile; or an objective that is not a "
            "multiple of the advantage); use optim.skip_zero_advantage=false"
        )
    if estimators()[estimator].token_shaping is not None:
        return (
            f"optim.skip_zero_advantage=true with advantage.estimator={estimator}: its per-token advantages "
            "are shaped from the entropies, not the sequence's alone; use optim.skip_zero_advantage=false"
        )
    return None


@dataclass
class WarmupConfig:
    enabled: bool = True
    # Short on purpose: RL should start from a policy that is right sometimes, not already converged. On the
    # default task (reverse_aligned) 25 steps leave every answer length below 60% and length 6 at 0%, which RL
    # then learns; 40 steps would reach 100% everywhere. Why this task and this warm-start:
    # docs/findings.md, "The default benchmark: why length-5 reversals stayed at 0%".
    steps: int = param(25, int_at_least(0))
    batch_size: int = param(64, positive_int)
    lr: float = param(1e-3, positive)
    seed: int = param(
        0, seed_range
    )  # separate from the RL seed: every seed of a sweep starts from one policy
    cache_dir: str = "${oc.env:TWINKLE_CACHE,${oc.env:HOME,.}/.cache/twinkle_exp}"


@dataclass
class ValSamplesConfig(Related):
    # Sampled validation beside the greedy one (training/evaluation.py, docs/experiment.md): n completions
    # per held-out prompt at `temperature`, scored into val/pass@k for each k of `ks` (null: 1..n) and
    # val/mean@n. 0 samples: off (the default: at n = 16 it decodes 16 times the greedy pass's tokens).
    n: int = param(0, int_at_least(0))
    temperature: float = param(1.0, positive)
    ks: list[int] | None = None
    # The evaluation's own random stream, apart from the training seed: sweeping it with the training seed
    # fixed measures evaluation-seed variance alone. Each validation restarts it, so two validations of
    # the same weights draw the same samples.
    seed: int = param(0, seed_range)
    # Sampled at the validation before training, at the last one, and at every `every`-th one between
    # (0: only the first and the last).
    every: int = param(0, int_at_least(0))

    def resolved_ks(self) -> list[int]:
        return list(range(1, self.n + 1)) if self.ks is None else list(self.ks)

    @staticmethod
    def relations(c: Mapping[str, Any]) -> list[str]:
        """pass@k needs at least k samples."""
        if c["n"] == 0 or c["ks"] is None:
            return []
        bad = [k for k in c["ks"] if not 1 <= k <= c["n"]]
        if bad or not c["ks"]:
            return [
                f"trainer.val_samples.ks={list(c['ks'])}: each k must lie in 1..n = {c['n']} "
                "(pass@k needs at least k samples per prompt), and the list must not be empty"
            ]
        return []


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
    val_samples: ValSamplesConfig = field(default_factory=ValSamplesConfig)
    samples_every: int = param(25, positive_int)  # rollouts between tables of sample completions in wandb
    # samples.jsonl in the run directory (docs/operations.md): completions kept per rollout (0: no file),
    # and the file's cap in megabytes, past which only the final rollout's are added.
    samples_file_rows: int = param(4, int_at_least(0))
    samples_file_mb: float = param(8.0, positive)
    enable_progress_bar: bool = True
    save_checkpoint: bool = True
    # Optimizer steps between checkpoints (written at the end of the rollout that reaches each multiple);
    # 0 or null: only at the end and when a signal or non-finite values stop the run. save_checkpoint=false
    # writes none at all, so a stopped run can only start again.
    checkpoint_every: int | None = param(100, optional(int_at_least(0)))


@dataclass
class LoggerConfig:
    wandb: bool = True
    trackio: bool = (
        False  # a local Trackio dashboard too (`[trackio]` extra; TRACKIO_DIR: where its files go)
    )
    project: str = "twinkle_exp"
    entity: str | None = None
    mode: str = param("${oc.env:WANDB_MODE,offline}", one_of(WANDB_MODES))  # offline unless the env says so
    job_type: str = "train"
    tags: list[str] = field(default_factory=list)


@dataclass
class Config(Related):
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
    # A directory holding an ended run (finished, failed, interrupted) that this start would not continue
    # from its checkpoint: refuse (one line), or move_aside (to `<dir>.previous-<time>`, then start there).
    previous_run: str = param("refuse", one_of(PREVIOUS_RUN_MODES))

    @staticmethod
    def relations(c: Mapping[str, Any]) -> list[str]:
        """An optimizer step needs at least one sample of the rollout; the lagged weights of
        rollout.staleness are whole copies, which FSDP's shards are not; the overlong buffer fits the budget."""
        rows = c["rollout"]["prompts_per_step"] * c["rollout"]["group_size"]
        minibatches = c["optim"]["num_minibatches"]
        problems = []
        if isinstance(minibatches, int) and minibatches > rows:
            problems.append(
                f"optim.num_minibatches={minibatches}: a rollout has only {rows} samples "
                f"(rollout.prompts_per_step x rollout.group_size); use at most {rows}"
            )
        groups = c["rollout"]["prompts_per_step"]
        if (
            c["optim"].get("minibatch_split") == "groups"
            and isinstance(minibatches, int)
            and minibatches > groups
        ):
            problems.append(
                f"optim.num_minibatches={minibatches} with optim.minibatch_split=groups: a rollout has only "
                f"{groups} groups (rollout.prompts_per_step); use at most {groups}, or minibatch_split=rows"
            )
        trainer = c.get("trainer")
        trainer = trainer if isinstance(trainer, Mapping) else {}  # absent or MISSING in a partial config
        staleness, strategy = c["rollout"].get("staleness", 0), trainer.get("strategy")
        if isinstance(staleness, int) and staleness > 0 and strategy == "fsdp2":
            problems.append(
                f"rollout.staleness={staleness} with trainer=fsdp: the lagged copies are of whole weights, "
                "not of FSDP shards; use trainer=ddp or a single device"
            )
        devices, nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)
        several = (isinstance(devices, int) and devices > 1) or (isinstance(nodes, int) and nodes > 1)
        if c["optim"].get("skip_zero_advantage") is True and (several or devices == -1):
            problems.append(
                f"optim.skip_zero_advantage=true with trainer.devices={devices}, trainer.num_nodes={nodes}: "
                "it runs on one process (each rank would run its own number of passes); use "
                "optim.skip_zero_advantage=false"
            )
        reward = c.get("reward")
        reward = reward if isinstance(reward, Mapping) else {}  # absent or MISSING in a partial config
        buffer, budget = reward.get("overlong_buffer", 0), c["rollout"]["max_new_tokens"]
        if isinstance(buffer, int) and isinstance(budget, int) and buffer > budget:
            problems.append(
                f"reward.overlong_buffer={buffer}: longer than the sampler's budget "
                f"rollout.max_new_tokens={budget}; use at most {budget}"
            )
        loss = c.get("loss")
        loss = loss if isinstance(loss, Mapping) else {}  # absent or MISSING in a partial config
        correction = c["optim"].get("rollout_correction")
        correction = correction if isinstance(correction, Mapping) else {}
        per_sequence = correction.get("mode") == "seq_mask" or (
            correction.get("mode") == "tis" and correction.get("level") == "sequence"
        )
        if loss.get("fold_rollout_weights") is True and per_sequence:
            # The fold multiplies the tokens' weights over the sequence: a sequence's weight on each token
            # would count once per token.
            problems.append(
                f"loss.fold_rollout_weights=true takes per-token weights, not optim.rollout_correction."
                f"mode={correction['mode']} at the sequence level; use a token-level mode or loss.fold_rollout_weights=false"
            )
        return problems
