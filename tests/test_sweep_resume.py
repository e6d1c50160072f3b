"""An interrupted sweep, rerun with the same hydra.sweep.dir: finished jobs are skipped, the interrupted one
resumes, the one never started runs; the report lists each job's status and attempts."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from twinkle_exp.report.__main__ import main as report_main

ARGS = ["debug=fast", "trainer.max_steps=60", "trainer.save_checkpoint=true", "logger=csv"]


def _job(sweep: Path, seed: int) -> Path:
    [job] = sweep.glob(f"{seed}_*")
    return job


def _status(job: Path) -> dict:
    return json.loads((job / "run.json").read_text())


def _running_at(job: Path, step: int) -> bool:
    try:
        with open(job / "metrics.csv", newline="") as f:
            return any(r.get("step") and int(r["step"]) >= step for r in csv.DictReader(f))
    except (OSError, ValueError, csv.Error):
        return False


@pytest.mark.slow
def test_rerunning_an_interrupted_sweep_skips_finished_jobs_and_resumes_the_others(tmp_path, cli_env):
    sweep = tmp_path / "sweep"
    command = [sys.executable, "-m", "twinkle_exp", "-m", "seed=0,1,2", *ARGS, f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(
        command, cwd=tmp_path, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.time() + 600
    while not (list(sweep.glob("1_*")) and _running_at(_job(sweep, 1), 8)):
        assert proc.poll() is None and time.time() < deadline, "the sweep ended before job 1 could be stopped"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert _status(_job(sweep, 0))["status"] == "finished"
    interrupted = _status(_job(sweep, 1))
    assert interrupted["status"] == "interrupted"
    assert interrupted["resume_command"].endswith(f"hydra.sweep.dir={sweep}")
    assert not list(sweep.glob("2_*")), "job 2 never started"
    assert report_main([str(sweep)]) == 0
    report = (sweep / "report" / "report.md").read_text()
    assert f"- `{_job(sweep, 1).name}`: interrupted, 1 attempt, last step {interrupted['step']}" in report
    finished_before = (_job(sweep, 0) / "run.json").read_text()

    rerun = subprocess.run(command, cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert (_job(sweep, 0) / "run.json").read_text() == finished_before, "a finished job was run again"
    assert "finished already" in (_job(sweep, 0) / "cli.log").read_text()
    resumed = _status(_job(sweep, 1))
    assert resumed["status"] == "finished" and resumed["final"]["steps"] == 60
    assert [a["status"] for a in resumed["attempts"]] == ["interrupted", "finished"]
    assert resumed["attempts"][1]["start_step"] == interrupted["step"]
    assert [a["status"] for a in _status(_job(sweep, 2))["attempts"]] == ["finished"]

    assert report_main([str(sweep)]) == 0
    report = (sweep / "report" / "report.md").read_text()
    assert f"- `{_job(sweep, 0).name}`: finished, 1 attempt, last step 60" in report
    assert f"- `{_job(sweep, 1).name}`: finished, 2 attempts, last step 60" in report
    assert f"- `{_job(sweep, 2).name}`: finished, 1 attempt, last step 60" in report
