"""Start-up checks over the composed config: every problem, one line each, before anything is built.

Each line names the key, the value, and what is allowed or what to do. Field ranges come from the checks
declared on the schemas' fields (`param(default, check)`); the relations between settings, the task's
text against the built-in tokenizer, the GPU and the wandb login are checked here. Lightning is not
imported, so a bad setting is reported within seconds.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources
import logging
import netrc
import os
import random
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from twinkle_exp.config.schema import Config, RewardConfig, RewardTermConfig
from twinkle_exp.config.store import OPTION_GROUPS, TYPED_GROUPS, option_schemas, typed_config
from twinkle_exp.errors import UserError

# Top-level names an override may start with besides Config's fields: Hydra's own, and the groups that are
# appended (+experiment=..., +sweep=...) or optional (debug=...).
_EXTRA_TOP_LEVEL = ("hydra", "experiment", "sweep", "debug")

log = logging.getLogger(__name__)


def config_groups() -> list[str]:
    conf = importlib.resources.files("twinkle_exp.conf")
    return sorted(d.name for d in conf.iterdir() if d.is_dir() and not d.name.startswith(("_", "hydra")))


def _known_top_level() -> list[str]:
    return sorted({f.name for f in dataclasses.fields(Config)} | set(config_groups()) | set(_EXTRA_TOP_LEVEL))


def _unknown_top_level(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "known: " + ", ".join(known)
    return f"'{key}' is not a config group or key ({hint})"


def override_problems(args: list[str]) -> list[str]:
    """Overrides of a top-level key that is neither a config field nor a group, before Hydra sees them.

    Hydra answers `lose=sapo` with "use +lose=sapo", which would then train the default loss without a word.
    (`+key=...` overrides compose, and `config_problems` refuses their unknown keys with the others.)
    """
    known = _known_top_level()
    problems = []
    for arg in args:
        if arg.startswith(("-", "+", "~")) or "=" not in arg:
            continue  # Hydra's flags (-m, --cfg job, ...), additions and deletions
        top = arg.split("=", 1)[0].split(".", 1)[0].split("/", 1)[0]
        if top not in known:
            problems.append(f"{arg}: {_unknown_top_level(top, known)}")
    return problems + _lora_problems(args)


def _lora_problems(args: list[str]) -> list[str]:
    """LoRA settings on a policy without them: Hydra would fail on its `lora: null` with an AssertionError."""
    choice = next((a.split("=", 1)[1] for a in reversed(args) if a.startswith("policy=")), "tiny")
    settings = [a for a in args if a.startswith("policy.lora.")]
    if (
        not settings or choice in ("hf_lora", "smollm2") or "," in choice
    ):  # a sweep over policies: Hydra decides per job
        return []
    return [
        f"{settings[0]}: policy={choice} has no LoRA settings; "
        "use policy=hf_lora policy.name_or_path=... to train LoRA adapters"
    ]


def _field_problems(schema: type, values: dict[str, Any], prefix: str) -> Iterator[str]:
    """Unknown keys, missing mandatory values and failed field checks of one group."""
    fields = {f.name: f for f in dataclasses.fields(schema)}
    for key in values:
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean '{prefix}.{close[0]}'?" if close else ""
            yield f"{prefix}.{key}: not a setting of {prefix}{hint} (valid: {', '.join(sorted(fields))})"
    for name, f in fields.items():
        value = values.get(name)
        sub = _field_type(schema, name)
        if isinstance(sub, type) and dataclasses.is_dataclass(sub) and isinstance(value, dict):
            yield from _field_problems(sub, value, f"{prefix}.{name}")  # optim.rollout_correction.*
            continue
        if value == "???":
            yield f"{prefix}.{name} is mandatory: set it, e.g. {prefix}.{name}=<value>"
            continue
        check = f.metadata.get("check")
        if check is not None and name in values:
            try:
                check(f"{prefix}.{name}", value)
            except ValueError as exc:
                yield str(exc)


def _field_type(schema: type, name: str) -> Any:
    """The annotation of `schema.name` as a type (the schemas' annotations are strings: `from __future__`)."""
    import typing

    return typing.get_type_hints(schema).get(name)


def _resolved(cfg: DictConfig, group: str) -> dict[str, Any]:
    return OmegaConf.to_container(cfg[group], resolve=True, throw_on_missing=False)


def _option_schema(group: str, target: str) -> type | None:
    return next((s for s in option_schemas()[group].values() if s._target_ == target), None)  # type: ignore[attr-defined]


def _reward_problems(reward: dict[str, Any]) -> Iterator[str]:
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


def _relation_problems(cfg: dict[str, Any]) -> Iterator[str]:
    rollout, optim = cfg["rollout"], cfg["optim"]
    rows = rollout["prompts_per_step"] * rollout["group_size"]
    if isinstance(optim["num_minibatches"], int) and optim["num_minibatches"] > rows:
        yield (
            f"optim.num_minibatches={optim['num_minibatches']}: a rollout has only {rows} samples "
            f"(rollout.prompts_per_step x rollout.group_size); use at most {rows}"
        )
    yield from _correction_problems(optim)
    accelerator = str(cfg["trainer"]["accelerator"])
    if accelerator in ("gpu", "cuda"):
        import torch

        if not torch.cuda.is_available():
            yield f"trainer.accelerator={accelerator}: no GPU is visible here (use trainer=cpu)"
    if str(cfg["policy"].get("_target_", "")).endswith("hf_policy"):
        from twinkle_exp.models.gguf import source_problems

        yield from source_problems(cfg["policy"])
    logger = cfg["logger"]
    if logger["wandb"] and logger["mode"] == "online" and not _wandb_logged_in():
        yield "logger.mode=online: wandb has no login here; run `wandb login`, or WANDB_MODE=offline, or logger=csv"


def _correction_problems(optim: dict[str, Any]) -> Iterator[str]:
    """The rollout correction weighs by pi_old / pi_sampler: the old log-probs must be the recomputed ones."""
    correction = optim.get("rollout_correction") or {}
    mode = correction.get("mode", "none")
    if mode != "none" and optim.get("old_logps") == "sampler":
        yield (
            f"optim.rollout_correction.mode={mode} with optim.old_logps=sampler: the correction weighs by "
            "recomputed / sampler log-probs, so it needs them recomputed; use optim.old_logps=auto or recompute"
        )
    low, high = correction.get("low", 0.0), correction.get("high", 1.0)
    numbers = isinstance(low, (int, float)) and isinstance(high, (int, float))
    if mode in ("mis", "seq_mask") and numbers and low > high:
        yield f"optim.rollout_correction.low={low:g} > high={high:g}: the kept range [low, high] is empty"


def _wandb_logged_in() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _built_problems(cfg: DictConfig, plain: dict[str, Any]) -> Iterator[str]:
    """Build the rewards and the task (cheap: it reads its file or draws its held-out set), fit its text."""
    from hydra.utils import instantiate

    from twinkle_exp.rewards import build_rewards

    try:
        reward = RewardConfig(**plain["reward"])
        build_rewards(reward.functions, reward.truncated_max)
    except UserError as exc:
        yield str(exc)
    try:  # the loss's relations between its parameters (clip_ratio_c on a loss that does not clip, ...)
        instantiate(cfg.loss)
    except Exception as exc:
        cause = exc.__cause__ or exc
        yield f"loss={_loss_choice(cfg)}: {cause}"
    try:
        task = instantiate(cfg.task)
        if plain["policy"].get("_target_", "").endswith("tiny_policy"):
            instantiate(cfg.policy)  # milliseconds; checks the model's own relations (heads divide width)
    except Exception as exc:  # the task's or model's own message names the file, line or setting
        cause = exc.__cause__ or exc
        yield f"{type(cause).__name__}: {cause}"
        return
    yield from _task_fit(task, plain)


def _loss_choice(cfg: DictConfig) -> str:
    from twinkle_exp.loss import LOSSES

    target = str(cfg.loss.get("_target_", ""))
    return next((name for name, cls in LOSSES.items() if target.endswith("." + cls.__name__)), target)


def _task_fit(task: Any, plain: dict[str, Any]) -> Iterator[str]:
    """The task's examples against the policy's tokenizer and positions, and the reward's gold answers."""
    from twinkle_exp.config import input_checks

    try:
        fit = input_checks.policy_tokenizer(plain["policy"], task)
    except (ValueError, ImportError) as exc:  # no such model directory, no chat template, ...
        yield str(exc)
        return
    located = _located(task)
    if plain["policy"].get("_target_", "").endswith("tiny_policy"):
        bad_text = next(_tiny_charset_problems(located), None)
        if bad_text is not None:
            yield bad_text
            return
    budget = plain["rollout"]["max_new_tokens"]
    if fit is not None:
        tokenizer, positions, limit, remedy = fit
        yield from input_checks.prompt_length_problems(located, tokenizer, positions, budget, limit, remedy)
        truncated_max = plain["reward"].get("truncated_max")
        yield from input_checks.answer_budget_problems(located, tokenizer, budget, truncated_max)
    yield from input_checks.gold_answer_problems(located, plain["reward"])


def _tiny_charset_problems(located: list[tuple[Any, str]]) -> Iterator[str]:
    from twinkle_exp.models import CharTokenizer

    tokenizer = CharTokenizer()
    for example, where in located:
        # Each distinct character once: a runaway 50 MB line costs a second, not minutes.
        bad = sorted(ch for ch in set(example.prompt) | set(example.answer) if not _encodable(tokenizer, ch))
        if bad:
            yield f"{where}: {bad[0]!r} is not in the built-in policy's character set; use policy=hf for such text"


def _located(task: Any) -> list[tuple[Any, str]]:
    """(example, where) for every example of a `Task`; a task of the user's own without the method: drawn."""
    if hasattr(task, "located_examples"):
        return task.located_examples()
    drawn = task.validation_set() + task.sample(512, random.Random(0))
    return [(example, f"task prompt {example.prompt!r}") for example in drawn]


def _encodable(tokenizer: Any, ch: str) -> bool:
    try:
        tokenizer.encode(ch)
    except ValueError:
        return False
    return True


def _top_level_problems(cfg: DictConfig) -> list[str]:
    """Failed checks of Config's own fields (seed=-1 would end in numpy's traceback)."""
    problems = []
    for f in dataclasses.fields(Config):
        check = f.metadata.get("check")
        if check is not None and f.name in cfg:
            try:
                check(f.name, OmegaConf.select(cfg, f.name))
            except ValueError as exc:
                problems.append(str(exc))
    return problems


def config_problems(cfg: DictConfig) -> list[str]:
    """Every problem of the composed `cfg`, one line each; empty when it can run."""
    problems = []
    fields = {f.name for f in dataclasses.fields(Config)}
    problems += [f"+{key}: {_unknown_top_level(key, _known_top_level())}" for key in cfg if key not in fields]
    problems += _top_level_problems(cfg)
    plain: dict[str, Any] = {}
    for group in [*TYPED_GROUPS, *OPTION_GROUPS]:
        try:
            plain[group] = _resolved(cfg, group)
        except OmegaConfBaseException as exc:
            problems.append(f"{group}: {exc.msg}")
    for group, schema in TYPED_GROUPS.items():
        if group in plain and group != "reward":
            problems += _field_problems(schema, plain[group], group)
    for group in OPTION_GROUPS:
        schema = _option_schema(group, plain.get(group, {}).get("_target_", ""))
        if schema is not None:
            problems += _field_problems(schema, plain[group], group)
    if "reward" in plain:
        problems += _reward_problems(plain["reward"])
    if not problems:  # relations, rewards and the task need every value in range
        problems += _relation_problems(plain)
        problems += _built_problems(cfg, plain)
    return problems


def kl_warning(loss: Any) -> str | None:
    """k1 with beta > 0: its expected gradient is 0 (`loss/kl.py`), while its `kl` metric looks plausible."""
    beta = loss.get("beta")
    if loss.get("kl_estimator") == "k1" and isinstance(beta, (int, float)) and beta > 0:
        return (
            f"loss.kl_estimator=k1 with loss.beta={beta}: k1's expected gradient is 0, so the KL penalty "
            "regularises nothing (its kl metric still looks like a KL); use k3 (the default) or k2"
        )
    return None


def config_warnings(config: Config) -> list[str]:
    """Settings that run but bend what the metrics mean, one line each (logged at start-up)."""
    lines = [kl_warning(config.loss or {})]
    r = config.rollout
    if r.top_k > 0 or r.top_p < 1.0:
        lines.append(
            f"rollout.top_k={r.top_k} rollout.top_p={r.top_p:g}: tokens are drawn from the filtered softmax, "
            "but the old log-probs and the loss score the full one, so the update treats them as on-policy "
            "samples of it; train/sampler/filtered_mass logs the gap (docs/experiment.md, 'Top-k and top-p')"
        )
    return [line for line in lines if line]


def check_config(cfg: DictConfig) -> Config:
    """The composed config as a typed `Config`, or ValueError listing every problem (one per line)."""
    problems = config_problems(cfg)
    if problems:
        raise ValueError("\n".join(problems))
    config = typed_config(cfg)
    for line in config_warnings(config):
        log.warning(line)
    return config
