"""Every option of every config group composes (and instantiates); bad overrides fail naming the problem.

Options are discovered from the YAML files of the installed `twinkle_exp.conf` package and, for the `loss`
group, from the loss registry, so a new option is tested without editing this file.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
import random
from typing import Any

import pytest
from hydra import compose
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from twinkle_exp.config.schema import LOSS_EXPERIMENT_DEFAULTS
from twinkle_exp.config.store import register_configs
from twinkle_exp.loss import LOSSES, PolicyGradientLoss, SAPOLoss
from twinkle_exp.policy.build import Policy
from twinkle_exp.rewards import RewardSet, build_rewards
from twinkle_exp.tasks import Task

register_configs()

CONF = importlib.resources.files("twinkle_exp.conf")
GROUPS: dict[str, list[str]] = {
    d.name: sorted(f.name.removesuffix(".yaml") for f in d.iterdir() if f.name.endswith(".yaml"))
    for d in CONF.iterdir()
    if d.is_dir() and d.name not in ("hydra", "__pycache__")
}
GROUPS["loss"] = sorted(LOSSES)  # stored from the registry: no yaml (twinkle_exp.config.store)
OPTIONS = [(group, option) for group, options in sorted(GROUPS.items()) for option in options]
APPENDED = {"experiment", "sweep"}  # not in the defaults list: selected with +group=option


pytestmark = pytest.mark.usefixtures("hydra_conf")  # conftest.py: the shipped config tree


def _compose(*overrides: str) -> DictConfig:
    return compose(config_name="config", overrides=list(overrides))


def _yaml_values(group: str, option: str) -> tuple[bool, dict[str, Any]]:
    """(is the option `@package _global_`, its own keys without the defaults list), read from the file."""
    path = CONF / group / f"{option}.yaml"
    if group == "loss":
        return False, {}  # its values are its class's defaults: test_loss_option_defaults_are_its_class_s
    text = path.read_text()
    values = OmegaConf.to_container(OmegaConf.create(text), resolve=False) or {}
    values.pop("defaults", None)
    return "@package _global_" in text, values


def _assert_subset(expected: Any, node: Any, where: str) -> None:
    """Every key of `expected` (the YAML) is in the composed `node` with the same (unresolved) value."""
    if isinstance(expected, dict):
        assert isinstance(node, DictConfig), f"{where}: expected a mapping, got {node!r}"
        for key, value in expected.items():
            child = node._get_node(key)  # not `key in node`: that is False for a ??? (missing) value
            assert child is not None, f"{where}.{key} missing from the composed config"
            _assert_subset(value, child, f"{where}.{key}")
    else:
        got = (
            OmegaConf.to_container(node, resolve=False) if isinstance(node, DictConfig | ListConfig) else node
        )
        got = got._value() if hasattr(got, "_value") else got
        assert got == expected, f"{where}: composed {got!r}, YAML says {expected!r}"


def test_discovery_finds_the_groups_of_the_design():
    expected = {"advantage", "debug", "logger", "loss", "optim", "policy", "reward", "rollout", "task"}
    expected |= {"trainer", "warmup"}
    assert expected <= set(GROUPS), sorted(GROUPS)
    assert {"bnpo", "cispo", "drgrpo", "grpo", "gspo", "sapo"} <= set(GROUPS["loss"])
    assert not (CONF / "loss").is_dir(), "the loss options come from the registry alone"


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes_with_its_yaml_values(group, option):
    cfg = _compose(f"{'+' if group in APPENDED else ''}{group}={option}")
    is_global, values = _yaml_values(group, option)
    values.pop("hydra", None)  # Hydra's own settings (sweeper params) are not part of the job config
    if is_global:
        _assert_subset(values, cfg, "<root>")
    else:
        _assert_subset(values, cfg[group], group)
    # Every interpolation resolves (cache_dir, Dr.GRPO's length); only the user-supplied ??? may remain.
    missing = {
        ("policy", "hf"): "policy.name_or_path",
        ("policy", "hf_lora"): "policy.name_or_path",
        ("task", "jsonl"): "task.path",
        ("task", "hf_dataset"): "task.path",
    }
    if (group, option) in missing:
        parent, leaf = missing[(group, option)].split(".")
        assert OmegaConf.is_missing(cfg[parent], leaf)
    else:
        json.dumps(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True))


@pytest.mark.parametrize("option", GROUPS["loss"])
def test_loss_option_instantiates_its_class_with_the_yaml_parameters(option):
    cfg = _compose(f"loss={option}")
    loss = instantiate(cfg.loss)
    assert type(loss) is LOSSES[option]
    assert isinstance(loss, PolicyGradientLoss)
    params = OmegaConf.to_container(cfg.loss, resolve=True)
    assert params.pop("_target_") == f"twinkle_exp.loss.{type(loss).__name__}"
    for key, value in params.items():
        if value is None and key in ("tau_pos", "tau_neg"):
            value = params["tau"]  # None: the same as tau
        assert getattr(loss, key) == value, f"{option}: {key}"
    assert loss.beta == 0.01  # the experiment's default (LOSS_EXPERIMENT_DEFAULTS), unlike the class's 0.0


@pytest.mark.parametrize("option", GROUPS["loss"])
def test_loss_option_defaults_are_its_class_s(option):
    """`loss=<name>` composes to the class's own defaults, but for the experiment's and the class's
    `config_defaults` (interpolations into the rest of the config)."""
    cls = LOSSES[option]
    composed = OmegaConf.to_container(_compose(f"loss={option}").loss, resolve=False)
    assert composed.pop("_target_") == f"twinkle_exp.loss.{cls.__name__}"
    overrides = {**LOSS_EXPERIMENT_DEFAULTS, **cls.config_defaults}
    assert composed == {f.name: overrides.get(f.name, f.default) for f in dataclasses.fields(cls)}


def test_sapo_tau_override():
    loss = instantiate(_compose("loss=sapo", "loss.tau=0.5").loss)
    assert type(loss) is SAPOLoss
    assert (loss.tau, loss.tau_pos, loss.tau_neg) == (0.5, 0.5, 0.5)
    loss = instantiate(_compose("loss=sapo", "loss.tau=0.5", "loss.tau_neg=2").loss)
    assert (loss.tau_pos, loss.tau_neg) == (0.5, 2.0)


@pytest.mark.parametrize("max_new_tokens", [None, 13])
def test_drgrpo_length_follows_the_sampler(max_new_tokens):
    overrides = ["loss=drgrpo"] + (
        [] if max_new_tokens is None else [f"rollout.max_new_tokens={max_new_tokens}"]
    )
    cfg = _compose(*overrides)
    loss = instantiate(cfg.loss)
    assert loss.max_completion_length == cfg.rollout.max_new_tokens
    if max_new_tokens is not None:
        assert loss.max_completion_length == max_new_tokens


def test_invalid_loss_value_raises_at_instantiation_naming_it():
    cfg = _compose("loss=sapo", "loss.tau=-1")  # the right type, so only the class can refuse it
    with pytest.raises(Exception, match=r"tau must be > 0, got -1"):
        instantiate(cfg.loss)


@pytest.mark.parametrize("option", GROUPS["task"])
def test_task_option_instantiates_a_task(option, tmp_path, monkeypatch):
    overrides = [f"task={option}"]
    if option in ("gsm8k", "hf_dataset"):  # from a local file in GSM8K's format, never the hub
        import datasets
        from gsm8k_helpers import gsm8k_rows, write_jsonl

        monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_datasets_cache")
        data = write_jsonl(tmp_path / "gsm8k.jsonl", gsm8k_rows(40))
        overrides += [f"task.path={data}", "task.num_validation=8"]
        if option == "hf_dataset":
            overrides.append("task.answer_extractor=gsm8k")
    if option == "jsonl":
        data = tmp_path / "train.jsonl"
        data.write_text(
            "".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(80))
        )
        overrides += [f"task.path={data}", "task.num_validation=8"]
    cfg = _compose(*overrides)
    task = instantiate(cfg.task)
    assert isinstance(task, Task)
    assert type(task).__name__ == cfg.task._target_.rsplit(".", 1)[1]
    validation = task.validation_set()
    assert len(validation) == cfg.task.num_validation
    assert len(task.sample(3, random.Random(0))) == 3


def test_tiny_policy_instantiates():
    from twinkle_exp.models import TinyCausalLM

    cfg = _compose("policy=tiny")
    policy = instantiate(cfg.policy)
    assert isinstance(policy, Policy)
    assert isinstance(policy.model, TinyCausalLM)
    assert policy.model.config.d_model == cfg.policy.d_model
    assert len(policy.model.blocks) == cfg.policy.n_layers


def test_hf_policy_requires_a_name_or_path():
    cfg = _compose("policy=hf")
    assert OmegaConf.is_missing(cfg.policy, "name_or_path")
    with pytest.raises(Exception, match="name_or_path"):
        instantiate(cfg.policy)


def test_hf_policy_instantiates_from_a_local_dir(tiny_hf_dir):
    cfg = _compose("policy=hf", f"policy.name_or_path={tiny_hf_dir}")
    policy = instantiate(cfg.policy)
    assert isinstance(policy, Policy)
    assert type(policy.model).__name__ == "LlamaForCausalLM"
    assert policy.tokenizer.vocab_size == policy.model.config.vocab_size


@pytest.mark.parametrize("option", GROUPS["reward"])
def test_reward_option_builds_callables(option):
    cfg = _compose(f"reward={option}")
    rewards = build_rewards(cfg.reward.functions, cfg.reward.truncated_max)
    assert isinstance(rewards, RewardSet)
    assert [f.name for f in rewards.functions] == list(cfg.reward.functions)
    prompts, completions, answers = ["1+2=", "1+2=", "1+2="], ["3", "4", "3333"], ["3", "3", "3"]
    if option == "math_format":  # its answers count only inside the tags
        completions = [f"<answer>{c}</answer>" for c in completions]
    if option == "scratchpad":  # its answers count only after the separator
        completions = [f"..|{c}" for c in completions]
    for term in rewards.functions:
        assert callable(term.fn)
        values = term.fn(prompts, completions, answers)
        assert len(values) == 3 and all(isinstance(v, float) for v in values), term.name
    total, per_fn = rewards(prompts, completions, answers)
    assert total.shape == (3,)
    assert set(per_fn) == set(cfg.reward.functions)
    if option == "random":  # the negative control: the answer does not matter (tests/test_rewards.py)
        return
    assert total[0] > total[1]  # the exact answer beats a wrong one under every other shipped reward
    for term in rewards.functions:
        if hasattr(term.fn, "close"):
            term.fn.close()  # the math checker's worker processes


# --- overrides that must fail at composition, naming what is wrong ------------------------------------------
def _messages(exc: BaseException) -> str:
    """The exception and its causes, as Hydra prints them."""
    parts = []
    while exc is not None:
        parts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        (["loss=nope"], ["nope", "loss"]),
        (["loss.tau=abc"], ["tau", "abc"]),  # the default loss (grpo) has no tau at all
        (["loss=sapo", "loss.tau=abc"], ["tau", "abc"]),  # SAPO has one, but it is a float
        (["loss.tau=0.5"], ["tau"]),
        (["loss=grpo", "loss.tau=0.5"], ["tau"]),
        (["loss=gspo", "loss.max_completion_length=8"], ["max_completion_length"]),
        (["rollout.group_size=abc"], ["group_size", "abc"]),
        (["trainer.bogus=1"], ["bogus"]),
        (["optim.mu=1.5"], ["mu", "1.5"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and "=" in v[0] else None,
)
def test_bad_override_raises_naming_the_problem(overrides, names):
    with pytest.raises(Exception) as info:
        _compose(*overrides)
    text = _messages(info.value)
    for name in names:
        assert name in text, f"{name!r} not in: {text}"


@pytest.mark.parametrize("override", ["+trainer.bogus=1", "+rollout.bogus=2", "+optim.nope=0.1"])
def test_added_unknown_key_is_refused_at_start(override):
    from twinkle_exp.config.checks import check_config

    key = override[1:].split("=")[0]
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        check_config(_compose(override))
    check_config(_compose())  # the default config passes
