import os
import sys
from pathlib import Path

# Triton decorates its own `triton.language` helpers (`tl.zeros`, ...) for the interpreter only when
# TRITON_INTERPRET is set at its first import, and Lightning imports Triton: a test module that imports
# Lightning before tests/test_fused_logprobs.py is collected would leave them compiled-only ("Cannot call
# @triton.jit'd outside of the scope of a kernel", Triton 3.9). No test runs Triton other than on CPU.
os.environ.setdefault("TRITON_INTERPRET", "1")

# Test helper modules (loss_helpers, ...) live beside the tests.
sys.path.insert(0, str(Path(__file__).parent))

# --- shared fixtures for the end-to-end tests (CLI, Hydra config, Hugging Face policy) --------------------
import subprocess  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def twinkle_cache(tmp_path_factory) -> Path:
    """One warm-start cache for the whole test session, so runs of the same policy and task reuse it."""
    return tmp_path_factory.mktemp("twinkle_cache")


@pytest.fixture(scope="session")
def cli_env(twinkle_cache, tmp_path_factory) -> dict[str, str]:
    """Environment of a `python -m twinkle_exp` subprocess: wandb offline and silent, caches under tmp."""
    wandb_home = tmp_path_factory.mktemp("wandb_home")
    env = dict(os.environ)
    for var in ("HYDRA_FULL_ERROR", "TWINKLE_EXP_PLUGINS", "TWINKLE_EXP_LOSSES"):  # the tests set their own
        env.pop(var, None)
    env.update(
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_CONFIG_DIR=str(wandb_home / "config"),
        WANDB_CACHE_DIR=str(wandb_home / "cache"),
        WANDB_DATA_DIR=str(wandb_home / "data"),
        TWINKLE_CACHE=str(twinkle_cache),
    )
    # Tiny models: on a small shared CPU, intra-op thread pools cost more than they gain (about 2x here).
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


@pytest.fixture
def run_cli(tmp_path, cli_env):
    """`run_cli(*overrides)`: `python -m twinkle_exp *overrides` in tmp_path (not the repo) -> CompletedProcess."""

    def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "twinkle_exp", *args],
            cwd=tmp_path,
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory) -> Path:
    """A random tiny Llama and a character-level fast tokenizer, saved with `save_pretrained` (no download)."""
    from hf_helpers import save_tiny_hf_policy

    return save_tiny_hf_policy(tmp_path_factory.mktemp("tiny_hf"))


@pytest.fixture(scope="session")
def read_wandb_run():
    """`read_wandb_run(path to run-*.wandb)` -> the run record of an offline wandb run, as a plain dict.

    {"id", "name", "group", "job_type", "project", "tags": [...], "config": {key: value}, "exit": bool},
    read from the transaction log with tests/wandb_records.py (no network, no wandb private reader).
    """
    import json as _json

    from wandb_records import raw_records

    def read(path: Path) -> dict:
        from wandb.proto import wandb_internal_pb2 as pb

        out: dict = {"config": {}, "exit": False}
        for payload in raw_records(path):
            record = pb.Record()
            record.ParseFromString(payload)
            kind = record.WhichOneof("record_type")
            if kind == "run" and "id" not in out:
                run = record.run
                out.update(
                    id=run.run_id,
                    name=run.display_name,
                    group=run.run_group,
                    job_type=run.job_type,
                    project=run.project,
                    tags=list(run.tags),
                )
                updates = run.config.update
            elif kind == "config":
                updates = record.config.update
            else:
                out["exit"] |= kind == "exit"
                continue
            for item in updates:
                key = item.key or "/".join(item.nested_key)
                out["config"][key] = _json.loads(item.value_json)
        return out

    return read


@pytest.fixture(scope="module")
def hydra_conf():
    """Hydra initialised on the shipped config tree for a module's `compose` calls (`pytestmark`)."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        yield
    GlobalHydra.instance().clear()


@pytest.fixture
def one_thread():
    """One intra-op thread for the test: the models are tiny, and on a shared 2-core machine threads cost
    far more than they gain."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
