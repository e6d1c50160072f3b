"""Through the CLI, what a user ran is never lost or silently corrupted (issue 34): an ended run is not
overwritten (refused in one line, or moved aside when asked), a checkpoint or cache whose bytes changed is
caught by its digest, a refused start leaves no trace, a second process on a directory in use is refused
(and a killed one's lock is not stuck), and a disk that fills up ends the run "failed" in one line with the
last good checkpoint intact."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from cli_run_helpers import check_ok, metric_rows, mounted_tmpfs, run_twinkle, start_twinkle
from test_lifecycle_cli import _wait_for_line
from test_lifecycle_faults import _tree

from twinkle_exp.models.cache_files import digest_problem
from twinkle_exp.report.loading.runs import find_job_dirs

FAST = ["debug=fast", "logger=csv"]
KEPT = [*FAST, "trainer.save_checkpoint=true"]


def _flip_middle(path: Path, n: int = 64) -> None:
    """Invert `n` bytes in the middle of the file: same size, other content (a disk or copy fault)."""
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + n] = bytes(b ^ 0xFF for b in data[mid : mid + n])
    path.write_bytes(bytes(data))


def _status(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


def _one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("twinkle_exp: ")]
    return line


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory, cli_env) -> Path:
    """A finished `debug=fast` run: no checkpoint (the preset's default)."""
    root = tmp_path_factory.mktemp("fast_run")
    check_ok(run_twinkle([*FAST, f"hydra.run.dir={root / 'run'}"], root, cli_env))
    return root / "run"


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory, cli_env) -> tuple[Path, Path]:
    """A finished 4-step run with its checkpoint, and the warm-start cache it was built from."""
    root = tmp_path_factory.mktemp("kept_run")
    env = {**cli_env, "TWINKLE_CACHE": str(root / "cache")}
    check_ok(run_twinkle([*KEPT, f"hydra.run.dir={root / 'run'}"], root, env))
    return root / "run", root / "cache"


# --- 1. a finished run is never overwritten ---------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("again", [[], ["loss=sapo"]], ids=["same command", "another experiment"])
def test_a_finished_run_without_a_checkpoint_is_refused_and_left_as_it_was(
    again, fast_run, tmp_path, cli_env
):
    run = tmp_path / "run"
    shutil.copytree(fast_run, run)
    before = _tree(run)
    line = _one_line(run_twinkle([*FAST, *again, f"hydra.run.dir={run}"], tmp_path, cli_env))
    assert f"{run} holds a finished run (loss grpo, seed 0, 4 optimizer steps" in line
    assert "it kept no checkpoint to continue from" in line
    assert "hydra.run.dir=" in line and "previous_run=move_aside" in line and ".previous-<time>" in line
    assert _tree(run) == before


@pytest.mark.slow
def test_another_experiment_on_a_checkpointed_run_names_both_ways_out(kept_run, tmp_path, cli_env):
    run, cache = tmp_path / "run", tmp_path / "cache"
    shutil.copytree(kept_run[0], run)
    shutil.copytree(kept_run[1], cache)
    before = _tree(run)
    env = {**cli_env, "TWINKLE_CACHE": str(cache)}
    line = _one_line(run_twinkle([*KEPT, "seed=3", f"hydra.run.dir={run}"], tmp_path, env))
    assert (
        "belongs to another experiment (seed: 0 there, 3 here)" in line and "previous_run=move_aside" in line
    )
    assert _tree(run) == before


@pytest.mark.slow
def test_move_aside_keeps_the_old_run_byte_for_byte_and_starts_afresh(fast_run, tmp_path, cli_env):
    run = tmp_path / "run"
    shutil.copytree(fast_run, run)
    before = _tree(run)
    check_ok(
        run_twinkle(
            [*FAST, "loss=sapo", "previous_run=move_aside", f"hydra.run.dir={run}"], tmp_path, cli_env
        )
    )
    [aside] = tmp_path.glob("run.previous-*")
    assert _tree(aside) == before, "the old run was not kept as it was"
    status = _status(run)
    assert status["status"] == "finished" and status["loss"] == "sapo" and status["attempt"] == 1
    assert "moved the finished run of" in (run / "cli.log").read_text()
    assert before["cli.log"] not in (run / "cli.log").read_bytes(), "the old run's log lines stayed"


# --- 2. checkpoints and caches verified ---------------------------------------------------------------------
@pytest.mark.slow
def test_a_changed_checkpoint_is_refused_naming_the_file(kept_run, tmp_path, cli_env):
    run, cache = tmp_path / "run", tmp_path / "cache"
    shutil.copytree(kept_run[0], run)
    shutil.copytree(kept_run[1], cache)
    ckpt = run / "checkpoints" / "last.ckpt"
    assert digest_problem(ckpt) is None
    _flip_middle(ckpt)
    before = _tree(run)
    env = {**cli_env, "TWINKLE_CACHE": str(cache)}
    line = _one_line(run_twinkle([*KEPT, "trainer.max_steps=8", f"hydra.run.dir={run}"], tmp_path, env))
    assert f"resume refused: {ckpt} does not match its digest" in line
    assert "no older checkpoint is kept" in line
    assert _tree(run) == before

    # An older intact checkpoint beside it is named as the way out.
    older = run / "checkpoints" / "step4.ckpt"
    shutil.copy(kept_run[0] / "checkpoints" / "last.ckpt", older)
    shutil.copy(kept_run[0] / "checkpoints" / "last.ckpt.sha256", older.with_name("step4.ckpt.sha256"))
    older.with_name("step4.ckpt.sha256").write_text(
        older.with_name("step4.ckpt.sha256").read_text().replace("last.ckpt", "step4.ckpt")
    )
    line = _one_line(run_twinkle([*KEPT, "trainer.max_steps=8", f"hydra.run.dir={run}"], tmp_path, env))
    assert f"an older intact checkpoint is {older}: resume={older}" in line


@pytest.mark.slow
def test_a_changed_warm_start_cache_is_rebuilt_with_a_warning_and_the_run_resumes(
    kept_run, tmp_path, cli_env
):
    run, cache = tmp_path / "run", tmp_path / "cache"
    shutil.copytree(kept_run[0], run)
    shutil.copytree(kept_run[1], cache)
    [cached] = cache.glob("warmup-*.pt")
    _flip_middle(cached)
    env = {**cli_env, "TWINKLE_CACHE": str(cache)}
    check_ok(run_twinkle([*KEPT, "trainer.max_steps=8", f"hydra.run.dir={run}"], tmp_path, env))
    log = (run / "cli.log").read_text()
    assert f"warm-start cache {cached} is unusable (its bytes changed since it was written" in log
    # Trained again with the same seed: the same reference, so the resume was not refused.
    assert _status(run)["status"] == "finished" and _status(run)["final"]["steps"] == 8
    assert digest_problem(cached) is None


# --- 3. no trace of a refused start -------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "bad", [["optim.lr=-1"], ["resume=/no/such/checkpoint"]], ids=["config check", "refused later"]
)
def test_a_refused_sweep_leaves_nothing_the_report_takes_for_a_run(bad, tmp_path, cli_env):
    sweep = tmp_path / "sweep"
    proc = run_twinkle(["-m", *FAST, "loss=grpo", *bad, f"hydra.sweep.dir={sweep}"], tmp_path, cli_env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert find_job_dirs(sweep) == []
    assert [p.name for p in sweep.iterdir()] == ["multirun.yaml"]


@pytest.mark.slow
def test_a_refused_single_run_leaves_no_directory(tmp_path, cli_env):
    proc = run_twinkle([*FAST, "optim.lr=-1", f"hydra.run.dir={tmp_path / 'new' / 'run'}"], tmp_path, cli_env)
    assert proc.returncode == 2
    assert not (tmp_path / "new").exists()


# --- 6. one process per run directory -----------------------------------------------------------------------
@pytest.mark.slow
def test_a_second_process_is_refused_and_a_killed_ones_lock_is_not_stuck(tmp_path, cli_env):
    run = tmp_path / "run"
    first = start_twinkle([*FAST, "warmup.steps=100000", f"hydra.run.dir={run}"], tmp_path, cli_env)
    try:
        _wait_for_line(run / "cli.log", "100000 supervised steps (cache miss", first)
        before = _tree(run)
        line = _one_line(run_twinkle([*FAST, f"hydra.run.dir={run}"], tmp_path, cli_env))
        assert f"{run} is in use: process {first.pid} is running there" in line
        after = _tree(run)  # refused before its Hydra wrote there: the first run's files are its own
        assert after.keys() == before.keys()
        assert all(after[k] == v for k, v in before.items() if k.startswith(".hydra"))
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate()
    assert _status(run)["status"] == "running"
    check_ok(run_twinkle([*FAST, f"hydra.run.dir={run}"], tmp_path, cli_env))
    assert (
        "says the run there is running, but no process holds the directory" in (run / "cli.log").read_text()
    )
    assert _status(run)["status"] == "finished"


# --- 7. a disk that fills up --------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """An 8 MiB tmpfs (a debug run's checkpoint is about 5 MB: one fits, a second beside it does not)."""
    with mounted_tmpfs(tmp_path / "disk", "8m") as mnt:
        yield mnt


@pytest.mark.slow
def test_a_full_disk_fails_the_run_in_one_line_and_keeps_the_last_checkpoint(small_disk, tmp_path, cli_env):
    run = small_disk / "run"
    args = [*KEPT, "trainer.checkpoint_every=4", "trainer.max_steps=8", f"hydra.run.dir={run}"]
    line = _one_line(run_twinkle(args, tmp_path, cli_env))
    ckpt = run / "checkpoints" / "last.ckpt"
    assert f"could not write {ckpt}: No space left on device (needed " in line and "bytes, " in line
    status = _status(run)
    assert status["status"] == "failed" and status["error"].startswith("DiskFullError: could not write")
    assert digest_problem(ckpt) is None
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert saved["twinkle_run"]["global_step"] == 4, "the last good checkpoint is not the one at step 4"
    assert not list(run.rglob("*.tmp"))

    # Room made: the same command continues from that checkpoint to the end.
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    check_ok(run_twinkle(args, tmp_path, cli_env))
    assert _status(run)["status"] == "finished" and _status(run)["final"]["steps"] == 8
    rows = metric_rows(run)
    assert max(int(r["step"]) for r in rows) == 8
    assert len({json.dumps(r, sort_keys=True) for r in rows}) == len(rows), "rows logged twice"
