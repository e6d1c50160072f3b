"""The cluster path run for real: sweeps through `hydra/launcher=slurm` (submitit) on a one-node Slurm
cluster started here (tests/slurm_cluster.py). The jobs run and the report reads them; a job requeued in the
middle (`scontrol requeue`: what a pre-emption does) resumes from its checkpoint and ends with the figures
of an uninterrupted run; a job cancelled (`scancel`) ends "interrupted" with its files intact."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_run_helpers import check_ok, metric_rows, run_twinkle, wait_for_step
from slurm_cluster import SlurmCluster, why_unavailable

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(why_unavailable() is not None, reason=str(why_unavailable())),
]

# The one node has 2 CPUs and no GPU: one CPU, one task and a little memory per job.
LAUNCHER = [
    "hydra/launcher=slurm",
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.tasks_per_node=1",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
]
FAST = ["debug=fast", "logger=csv"]
# Long enough that a job stopped at step STOP_AT is in the middle, past its first checkpoint (step 50).
LONG = [*FAST, "trainer.max_steps=200", "trainer.save_checkpoint=true", "trainer.checkpoint_every=50"]
STOP_AT = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    slurm = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        slurm.start()
        yield slurm
    finally:  # also when a daemon started and the next did not
        slurm.stop()


@pytest.fixture(scope="module")
def slurm_env(cluster, cli_env) -> dict[str, str]:
    return {**cli_env, "SLURM_CONF": cluster.env["SLURM_CONF"], "PATH": cluster.env["PATH"]}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, cli_env) -> Path:
    """The LONG run in one go, without Slurm: what a requeued job must end with."""
    root = tmp_path_factory.mktemp("uninterrupted")
    check_ok(run_twinkle([*LONG, f"hydra.run.dir={root / 'run'}"], root, cli_env))
    return root / "run"


def _sweep(sweep: Path, env: dict, *overrides: str) -> subprocess.Popen:
    """The sweep's driver (it waits for its jobs), in the background."""
    command = [sys.executable, "-m", "twinkle_exp", "-m", *LAUNCHER, *overrides, f"hydra.sweep.dir={sweep}"]
    return subprocess.Popen(
        command, cwd=sweep.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _only_job(sweep: Path, proc: subprocess.Popen, timeout: float = 300) -> Path:
    deadline = time.time() + timeout
    while not (jobs := [p for p in sweep.glob("0_*") if p.is_dir()]):
        assert proc.poll() is None and time.time() < deadline, "the job did not start"
        time.sleep(0.2)
    return jobs[0]


def _slurm_job(cluster: SlurmCluster, sweep: Path) -> dict[str, str]:
    [job] = [j for j in cluster.jobs() if j.get("StdOut", "").startswith(str(sweep))]
    return job


def _status(job: Path) -> dict:
    return json.loads((job / "run.json").read_text())


def _wait_for(condition, timeout: float, message: str) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, message
        time.sleep(0.5)


def test_a_sweep_runs_through_the_slurm_launcher_and_the_report_reads_it(tmp_path, slurm_env):
    sweep = tmp_path / "sweep"
    proc = _sweep(sweep, slurm_env, *FAST, "seed=0,1")
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if p.name[0].isdigit())
    assert [p.name for p in jobs] == ["0_debug=fast,logger=csv,seed=0", "1_debug=fast,logger=csv,seed=1"]
    for seed, job in enumerate(jobs):
        status = _status(job)
        assert status["status"] == "finished" and status["seed"] == seed and status["final"]["steps"] == 4
        # Each ran as a task of one Slurm job array, its log in submitit's folder.
        assert (sweep / ".submitit").is_dir() and "Job completed successfully" in "".join(
            p.read_text() for p in (sweep / ".submitit").glob(f"*_{seed}/*_log.out")
        )
    report = subprocess.run(
        [sys.executable, "-m", "twinkle_exp.report", str(sweep)],
        cwd=tmp_path,
        env=slurm_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr[-3000:]
    text = (sweep / "report" / "report.md").read_text()
    for job in jobs:
        assert f"- `{job.name}`: finished, 1 attempt, last step 4" in text


# How a running job is requeued, and the signal the run sees: Slurm's requeue (as a pre-emption does) sends
# SIGTERM; submitit's warning before the time limit is SIGUSR2, after which submitit requeues the job itself.
REQUEUES = {
    "scontrol requeue": (["scontrol", "requeue"], "SIGTERM"),
    "submitit's time-limit warning": (["scancel", "--signal=USR2"], "SIGUSR2"),
}


@pytest.mark.parametrize("how", list(REQUEUES))
def test_a_requeued_job_resumes_from_its_checkpoint_and_ends_as_if_never_stopped(
    how, tmp_path, cluster, slurm_env, uninterrupted
):
    command, signal_name = REQUEUES[how]
    sweep = tmp_path / "sweep"
    proc = _sweep(sweep, slurm_env, *LONG)
    job = _only_job(sweep, proc)
    wait_for_step(job, STOP_AT, proc)
    slurm_id = _slurm_job(cluster, sweep)["JobId"]
    subprocess.run([*command, slurm_id], env=slurm_env, check=True)
    # A requeued job waits (BeginTime) before it may start again; a pre-empted one would be rescheduled.
    _wait_for(lambda: _slurm_job(cluster, sweep)["JobState"] == "PENDING", 300, "the job was not requeued")
    cluster.scontrol("update", f"JobId={slurm_id}", "StartTime=now")
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]

    assert _slurm_job(cluster, sweep)["Restarts"] == "1"
    status = _status(job)
    first, second = status["attempts"]
    assert first["status"] == "interrupted" and first["error"].startswith(f"{signal_name} at optimizer step ")
    stopped_at = int(first["error"].rsplit(" ", 1)[1])
    assert stopped_at >= STOP_AT and stopped_at < 200, "the requeue did not land in the middle of the run"
    assert second["status"] == "finished" and second["start_step"] == stopped_at
    assert second["resumed_from"] == str(job / "checkpoints" / "last.ckpt")
    assert status["status"] == "finished" and status["final"]["steps"] == 200
    assert metric_rows(job) == metric_rows(uninterrupted), "the requeued job's figures differ"


def test_a_cancelled_job_ends_interrupted_with_its_files_intact(tmp_path, cluster, slurm_env, uninterrupted):
    sweep = tmp_path / "sweep"
    proc = _sweep(sweep, slurm_env, *LONG)
    job = _only_job(sweep, proc)
    wait_for_step(job, STOP_AT, proc)
    slurm_id = _slurm_job(cluster, sweep)["JobId"]
    subprocess.run(["scancel", slurm_id], env=slurm_env, check=True)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode != 0  # the driver reports the job it lost
    assert f"Job {slurm_id}" in err and "has not produced any output (state: CANCELLED" in err

    assert _slurm_job(cluster, sweep)["JobState"] == "CANCELLED"
    status = _status(job)
    assert status["status"] == "interrupted" and status["error"].startswith("SIGTERM at optimizer step ")
    step = status["step"]
    assert STOP_AT <= step < 200 and status["checkpoint"] == str(job / "checkpoints" / "last.ckpt")
    # Its rows are the uninterrupted run's up to where it stopped, and its checkpoint continues it to the end.
    rows = metric_rows(job)
    assert rows == metric_rows(uninterrupted)[: len(rows)] and int(rows[-1]["step"]) == step
    command = shlex.split(status["resume_command"])
    assert command[:3] == ["python", "-m", "twinkle_exp"]
    resumed = subprocess.run(
        [sys.executable, *command[1:]],
        cwd=tmp_path,
        env=slurm_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    check_ok(resumed)
    assert metric_rows(job) == metric_rows(uninterrupted)
