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
import json
import netrc
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from twinkle_exp.config import (
    OPTION_GROUPS,
    TYPED_GROUPS,
    Config,
    RewardConfig,
    RewardTermConfig,
    option_schemas,
    typed_config,
)
from twinkle_exp.errors import UserError

# Top-level names an override may start with besides Config's fields: Hydra's own, and the groups that are
# appended (+experiment=..., +sweep=...) or optional (debug=...).
_EXTRA_TOP_LEVEL = ("hydra", "experiment", "sweep", "debug")


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
        if value == "???":
            yield f"{prefix}.{name} is mandatory: set it, e.g. {prefix}.{name}=<value>"
            continue
        check = f.metadata.get("check")
        if check is not None and name in values:
            try:
                check(f"{prefix}.{name}", value)
            except ValueError as exc:
                yield str(exc)


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
        build_rewards(RewardConfig(**plain["reward"]))
    except UserError as exc:
        yield str(exc)
    try:
        task = instantiate(cfg.task)
        if plain["policy"].get("_target_", "").endswith("tiny_policy"):
            instantiate(cfg.policy)  # milliseconds; checks the model's own relations (heads divide width)
    except Exception as exc:  # the task's or model's own message names the file, line or setting
        cause = exc.__cause__ or exc
        yield f"{type(cause).__name__}: {cause}"
        return
    if plain["policy"].get("_target_", "").endswith("tiny_policy"):
        yield from _tiny_policy_fit(task, plain)


def _tiny_policy_fit(task: Any, plain: dict[str, Any]) -> Iterator[str]:
    from twinkle_exp.models import CharTokenizer

    tokenizer = CharTokenizer()
    for text, where in _task_texts(task, plain["task"]):
        bad = sorted({ch for ch in text if not _encodable(tokenizer, ch)})
        if bad:
            yield f"{where}: {bad[0]!r} is not in the built-in policy's character set; use policy=hf for such text"
            return
    longest = max(len(example.prompt) for example in _examples(task)) + 1  # + BOS
    budget = plain["rollout"]["max_new_tokens"]
    if longest + budget > plain["policy"]["max_seq_len"]:
        yield (
            f"policy.max_seq_len={plain['policy']['max_seq_len']}: prompts of up to {longest} tokens plus "
            f"rollout.max_new_tokens={budget} need {longest + budget}"
        )


def _examples(task: Any) -> list[Any]:
    # Procedural tasks draw prompts; a few hundred draws cover their lengths.
    return task.validation_set() + task.sample(512, random.Random(0))


def _task_texts(task: Any, task_cfg: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(text, where) for the task's text: each example of a jsonl file by line, drawn examples otherwise."""
    paths = [task_cfg.get(key) for key in ("path", "validation_path") if task_cfg.get(key)]
    if paths:
        for path in paths:
            for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
                if line.strip():  # the task has parsed the file already: every line is an object
                    record = json.loads(line)
                    yield f"{record['prompt']}{record['answer']}", f"{path}, line {lineno}"
        return
    for example in _examples(task):
        yield example.prompt + example.answer, f"task prompt {example.prompt!r}"


def _encodable(tokenizer: Any, ch: str) -> bool:
    try:
        tokenizer.encode(ch)
    except ValueError:
        return False
    return True


def config_problems(cfg: DictConfig) -> list[str]:
    """Every problem of the composed `cfg`, one line each; empty when it can run."""
    problems = []
    fields = {f.name for f in dataclasses.fields(Config)}
    problems += [f"+{key}: {_unknown_top_level(key, _known_top_level())}" for key in cfg if key not in fields]
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


def check_config(cfg: DictConfig) -> Config:
    """The composed config as a typed `Config`, or ValueError listing every problem (one per line)."""
    problems = config_problems(cfg)
    if problems:
        raise ValueError("\n".join(problems))
    return typed_config(cfg)
