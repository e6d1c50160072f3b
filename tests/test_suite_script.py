"""sweeps/suite.sh: one command for the losses over the task suite (four tasks, warm-starts, seeds), then the
suite report over every part; its commands compose, and bad input is refused before anything runs."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from twinkle_exp.config.store import register_configs

SCRIPT = Path(__file__).resolve().parents[1] / "sweeps" / "suite.sh"


def _dry_run(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT)], env={**os.environ, "DRY_RUN": "1", **env}, capture_output=True, text=True
    )


def test_one_command_sweeps_the_four_tasks_then_reports_the_suite():
    proc = _dry_run(LOSSES="grpo,cispo", WARM_STARTS="0,1,2", SEEDS="0,1,2")
    assert proc.returncode == 0, proc.stderr
    commands = [shlex.split(line[2:]) for line in proc.stdout.splitlines() if line.startswith("+ ")]
    assert len(commands) == 4
    *sweeps, report = commands
    dirs = [next(a.split("=", 1)[1] for a in c if a.startswith("hydra.sweep.dir=")) for c in sweeps]
    root = Path(dirs[0]).parent
    assert [Path(d).name for d in dirs] == ["builtin", "long_completions", "smollm2"] and all(
        Path(d).parent == root for d in dirs
    )
    assert report[:3] == ["python", "-m", "twinkle_exp.report.suite"] and report[3:6] == dirs
    assert report[-2:] == ["--out", str(root / "report")]
    assert "warmup.seed=0,1,2" in sweeps[0] and "warmup.seed=0,1,2" in sweeps[1]
    assert not any(a.startswith("warmup.seed") for a in sweeps[2])  # the pretrained model: one warm-start
    register_configs()
    tasks = set()
    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        for command in sweeps:  # each sweep's first job composes
            overrides = [a.split(",")[0] for a in command[4:] if not a.startswith("hydra.")]
            cfg = compose("config", overrides=overrides)
            tasks.add(cfg.task._target_)
    assert len(tasks) == 3  # the built-in sweep's first job, the scratchpad regime and SmolLM2's addition


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SEEDS": "0 1"}, "SEEDS must be a comma-separated list of seeds"),
        ({"LOSSES": "grpo cispo"}, "LOSSES must be comma-separated loss names"),
        ({"SMOLLM2": "yes"}, "SMOLLM2 must be 0 or 1"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_anything_runs(env, message):
    proc = _dry_run(**env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"suite.sh: {message}, got {next(iter(env.values()))}"]
