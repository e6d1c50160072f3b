"""Resume through the CLI: 2N steps equal N steps resumed for N more; a real SIGTERM leaves a loadable
checkpoint, a complete metrics.csv and run.json "interrupted", and its resume command reaches the same
weights; another experiment's checkpoint or a missing warm-start cache is refused (exit 2, run.json kept);
NaN rewards stop it."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_run_helpers import check_ok, final_weights, metric_rows, run_twinkle, wait_for_step

from twinkle_exp import metric_names as M

STEPS = 80  # 20 rollouts of the debug=fast run
FAST = ["debug=fast", "trainer.save_checkpoint=true", "trainer.checkpoint_every=16"]


def _same_run(a: Path, b: Path) -> None:
    rows_a, rows_b = metric_rows(a), metric_rows(b)
    assert [r["step"] for r in rows_b] == [r["step"] for r in rows_a], "rows lost or written twice"
    assert rows_b == rows_a
    weights_a, weights_b = final_weights(a), final_weights(b)
    differing = [k for k in weights_a if not torch.equal(weights_a[k], weights_b[k])]
    assert not differing, f"weights differ: {differing}"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, cli_env) -> Path:
    cwd = tmp_path_factory.mktemp("uninterrupted")
    check_ok(run_twinkle([*FAST, f"trainer.max_steps={STEPS}", f"hydra.run.dir={cwd / 'run'}"], cwd, cli_env))
    return cwd / "run"


@pytest.mark.slow
def test_2n_steps_equal_n_steps_resumed_for_n_more(uninterrupted, tmp_path, cli_env, read_wandb_run):
    run = tmp_path / "run"
    check_ok(
        run_twinkle([*FAST, f"trainer.max_steps={STEPS // 2}", f"hydra.run.dir={run}"], tmp_path, cli_env)
    )
    check_ok(run_twinkle([*FAST, f"trainer.max_steps={STEPS}", f"hydra.run.dir={run}"], tmp_path, cli_env))
    _same_run(uninterrupted, run)

    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "finished" and status["final"]["steps"] == STEPS
    assert [(a["status"], a["start_step"]) for a in status["attempts"]] == [("finished", 0), ("finished", 40)]
    assert status["attempts"][1]["resumed_from"] == str(run / "checkpoints" / "last.ckpt")
    attempts = sorted((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(attempts) == 2
    assert {read_wandb_run(p)["id"] for p in attempts} == {status["wandb_id"]}  # one wandb run, resumed


@pytest.mark.slow
def test_sigterm_leaves_a_checkpoint_a_complete_csv_and_resumes_to_the_same_weights(
    uninterrupted, tmp_path, cli_env, read_wandb_run
):
    run = tmp_path / "run"
    args = [*FAST, f"trainer.max_steps={STEPS}", f"hydra.run.dir={run}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "twinkle_exp", *args],
        cwd=tmp_path,
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_step(run, 18, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, f"exit {proc.returncode}\n{err[-3000:]}"

    status = json.loads((run / "run.json").read_text())
    step = status["step"]
    assert status["status"] == "interrupted" and status["error"] == f"SIGTERM at optimizer step {step}"
    assert 18 <= step < STEPS
    checkpoint = torch.load(status["checkpoint"], map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == step, "the checkpoint is the one of the step the run stopped at"
    rows = metric_rows(run)
    assert [int(r["step"]) for r in rows if M.LOSS in r] == list(range(1, step + 1)), (
        "metrics.csv is complete"
    )
    assert rows == metric_rows(uninterrupted)[: len(rows)]
    [wandb_file] = (run / "wandb").glob("offline-run-*/run-*.wandb")
    assert read_wandb_run(wandb_file)["exit"], "the wandb run was finished (flushed)"
    assert f"resume with:\n  {status['resume_command']}" in err

    command = shlex.split(status["resume_command"])
    assert command[:3] == ["python", "-m", "twinkle_exp"]
    check_ok(run_twinkle(command[3:], tmp_path, cli_env))
    _same_run(uninterrupted, run)
    status = json.loads((run / "run.json").read_text())
    assert [a["status"] for a in status["attempts"]] == ["interrupted", "finished"]


@pytest.mark.slow
def test_a_resume_is_refused_for_another_experiment_or_a_missing_warm_start_cache(tmp_path, cli_env):
    env = {**cli_env, "TWINKLE_CACHE": str(tmp_path / "cache")}
    run = f"hydra.run.dir={tmp_path / 'run'}"
    check_ok(run_twinkle([*FAST, "logger=csv", "trainer.max_steps=4", run], tmp_path, env))

    refused = run_twinkle([*FAST, "logger=csv", "trainer.max_steps=8", "loss=sapo", run], tmp_path, env)
    assert refused.returncode == 2
    assert "resume refused" in refused.stderr
    assert (
        "(loss._target_: 'twinkle_exp.loss.GRPOLoss' there, 'twinkle_exp.loss.SAPOLoss' here"
        in refused.stderr
    )

    for cached in (tmp_path / "cache").glob("warmup-*.pt"):
        cached.unlink()
    no_cache = run_twinkle([*FAST, "logger=csv", "trainer.max_steps=8", run], tmp_path, env)
    assert no_cache.returncode == 2
    assert "warm-start cache" in no_cache.stderr and "is missing. Restore that file" in no_cache.stderr
    status = json.loads((tmp_path / "run" / "run.json").read_text())
    assert status["status"] == "finished"  # a refused resume leaves the finished run as it was
    assert [a["status"] for a in status["attempts"]] == ["finished"]


@pytest.mark.slow
def test_non_finite_rewards_stop_the_run_with_a_checkpoint_and_the_cause(tmp_path, cli_env):
    env = {**cli_env, "PYTHONPATH": str(Path(__file__).parent)}
    broken = "reward.functions.partial.fn._target_=reward_fixtures.nan_reward"  # debug=fast: reward=shaped
    run = f"hydra.run.dir={tmp_path / 'run'}"
    proc = run_twinkle([*FAST, "logger=csv", "optim.max_skipped_steps=2", broken, run], tmp_path, env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    status = json.loads((tmp_path / "run" / "run.json").read_text())
    assert status["status"] == "failed" and status["step"] == 2
    assert "2 consecutive optimizer steps skipped for non-finite values" in status["error"]
    assert "the first was the reward at step 1" in status["error"]
    assert "the first was the reward at step 1" in proc.stderr
    assert torch.load(status["checkpoint"], map_location="cpu", weights_only=False)["global_step"] == 2


@pytest.mark.slow
def test_sigterm_before_training_still_ends_as_interrupted(tmp_path, cli_env):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "twinkle_exp", *FAST, f"hydra.run.dir={run}"],
        cwd=tmp_path,
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while not (run / "cli.log").exists():  # Hydra calls the app right after opening its log
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.02)
    time.sleep(0.5)  # the handlers are installed; the imports (or the warm-start) are still going on
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "interrupted" and status["step"] == 0 and status["checkpoint"] is None
    assert "no checkpoint yet: a resume starts from the beginning" in err
