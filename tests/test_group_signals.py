"""A signal sent to the run's whole process group (as `timeout`, Slurm and a terminal's Ctrl-C send it) stops
the run as a signal to its main process does: the math verifier's worker processes live on, the step
finishes with their verdicts, the checkpoint is written, and the resumed run ends with the figures of a run
never stopped. Also during the warm-start and for a job of an `-m` sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_run_helpers import check_ok, metric_rows, run_twinkle, start_twinkle, wait_for_step

MATH = ["debug=fast", "task=addition", "reward=math", "logger=csv", "trainer.save_checkpoint=true"]
STEPS = ["trainer.max_steps=40"]


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _verifier_workers(pid: int) -> list[int]:
    def is_worker(child: int) -> bool:
        try:
            return b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            return False

    return [child for child in _children(pid) if is_worker(child)]


def _signal_group_mid_run(proc: subprocess.Popen, run: Path, signum: int, step: int = 4) -> str:
    """Wait for optimizer step `step`, check the verifier's workers are alive, signal the whole group."""
    wait_for_step(run, step, proc)
    assert _verifier_workers(proc.pid), "no verifier worker to test: the pool did not start"
    os.killpg(proc.pid, signum)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signum, err[-3000:]
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-3000:]
    return err


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, cli_env) -> Path:
    root = tmp_path_factory.mktemp("uninterrupted")
    check_ok(run_twinkle([*MATH, *STEPS, f"hydra.run.dir={root / 'run'}"], root, cli_env))
    return root / "run"


def _check_interrupted_then_resumed(
    run: Path, err: str, signum: int, args: list[str], cwd: Path, env: dict, uninterrupted: Path
) -> None:
    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "interrupted" and status["checkpoint"] == str(
        run / "checkpoints" / "last.ckpt"
    )
    assert f"interrupted by {signal.Signals(signum).name} at optimizer step {status['step']}" in err
    # The interrupted step was scored by live workers: resumed, the run is the one never stopped.
    check_ok(run_twinkle(args, cwd, env))
    assert metric_rows(run) == metric_rows(uninterrupted)


@pytest.mark.slow
def test_a_signal_to_the_process_group_mid_run_finishes_the_step_with_the_verifier_alive(
    tmp_path, cli_env, uninterrupted
):
    run = tmp_path / "run"
    args = [*MATH, *STEPS, f"hydra.run.dir={run}"]
    err = _signal_group_mid_run(start_twinkle(args, tmp_path, cli_env), run, signal.SIGTERM)
    _check_interrupted_then_resumed(run, err, signal.SIGTERM, args, tmp_path, cli_env, uninterrupted)


@pytest.mark.slow
def test_ctrl_c_while_the_verifier_starts_lets_its_workersstart_twinkle(tmp_path, cli_env, uninterrupted):
    """The workers start with the first answer checked: a Ctrl-C then reaches them while they import."""
    run = tmp_path / "run"
    args = [*MATH, *STEPS, f"hydra.run.dir={run}"]
    proc = start_twinkle(args, tmp_path, cli_env)
    deadline = time.time() + 300
    while not _verifier_workers(proc.pid):
        assert proc.poll() is None and time.time() < deadline, "the verifier's workers did not start"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    _check_interrupted_then_resumed(run, err, signal.SIGINT, args, tmp_path, cli_env, uninterrupted)


@pytest.mark.slow
def test_a_signal_to_the_process_group_stops_the_warmstart_twinkle(tmp_path, cli_env):
    run, cache = tmp_path / "run", tmp_path / "cache"
    env = {**cli_env, "TWINKLE_CACHE": str(cache)}
    proc = start_twinkle([*MATH, *STEPS, "warmup.steps=100000", f"hydra.run.dir={run}"], tmp_path, env)
    deadline = time.time() + 300
    while not (
        (run / "cli.log").exists() and "supervised steps (cache miss" in (run / "cli.log").read_text()
    ):
        assert proc.poll() is None and time.time() < deadline, "the warm-start did not start"
        time.sleep(0.05)
    time.sleep(1.0)  # some steps in
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "interrupted by SIGTERM at optimizer step 0" in err and "Traceback" not in err
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    assert not list(cache.glob("warmup-*.pt")), "a part of a warm-start was cached"


@pytest.mark.slow
def test_a_signal_to_a_sweeps_process_group_stops_its_job_which_the_rerun_resumes(
    tmp_path, cli_env, uninterrupted
):
    sweep = tmp_path / "sweep"
    command = ["-m", *MATH, *STEPS, "seed=0", f"hydra.sweep.dir={sweep}"]
    proc = start_twinkle(command, tmp_path, cli_env)
    deadline = time.time() + 300
    while not (jobs := list(sweep.glob("0_*"))):
        assert proc.poll() is None and time.time() < deadline, "the sweep's job did not start"
        time.sleep(0.05)
    [job] = jobs
    _signal_group_mid_run(proc, job, signal.SIGTERM)
    assert json.loads((job / "run.json").read_text())["status"] == "interrupted"
    check_ok(run_twinkle(command, tmp_path, cli_env))
    assert metric_rows(job) == metric_rows(uninterrupted)


# In a process group of its own: a pool's workers, signalled while they start, between two maps and while
# both hold a call; the parent handles each signal, and every call must come back with its result. The pool
# is never closed: the process must still exit (the workers ignore the SIGTERM multiprocessing ends them with).
_POOL_SCRIPT = """
import json, os, signal, threading, time
from twinkle_exp.verifier.pool import TimeoutPool
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
handled = []
for s in SIGNALS:
    signal.signal(s, lambda n, f: handled.append(n))
pool = TimeoutPool(time.sleep, workers=2, timeout_s=30)
threading.Timer(0.05, os.kill, (0, signal.SIGTERM)).start()  # the workers are still starting
out = [pool.map([(0.0,), (0.0,)])]
pids = [w.process.pid for w in pool._workers]
for s in SIGNALS:
    os.kill(0, s)
time.sleep(0.5)
threading.Timer(0.3, os.kill, (0, signal.SIGTERM)).start()  # both calls in flight
out.append(pool.map([(1.0,), (1.0,)]))
alive = [w.process.pid for w in pool._workers if w.process.is_alive()]
print(json.dumps({"out": out, "same_workers": alive == pids, "handled": len(handled)}))
"""


def test_pool_workers_outlive_signals_sent_to_their_group(cli_env):
    proc = subprocess.run(
        [sys.executable, "-c", _POOL_SCRIPT],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"out": [[None, None], [None, None]], "same_workers": True, "handled": 6}
