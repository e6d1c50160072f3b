"""The rules around a resume, without training: which checkpoint, which refusals, run.json's attempts,
metrics.csv's rows, the resume command, SLURM's requeue."""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path

import pytest
import torch

from twinkle_exp.errors import UserError
from twinkle_exp.lifecycle import resume, signals
from twinkle_exp.lifecycle.checkpoints import FORMAT, RUN_KEY, last_checkpoint, weights_digest
from twinkle_exp.lifecycle.nonfinite import NonFiniteError
from twinkle_exp.lifecycle.stopping import end_stopped_run, resume_command
from twinkle_exp.tracking.metrics_file import MetricsCSVLogger, truncate_rows
from twinkle_exp.tracking.run_json import JobInfo, RunStatus

CONFIG = {"loss": {"_target_": "GRPOLoss", "beta": 0.01}, "task": {"n": 1}, "policy": {"d": 32}, "seed": 0}
CONFIG |= {"trainer": {"max_steps": 8}, "resume": "auto"}


def _checkpoint(run_dir: Path, step: int = 8, **run_info) -> Path:
    path = last_checkpoint(run_dir)
    path.parent.mkdir(parents=True)
    info = {"format": FORMAT, "global_step": step, "csv_rows": 5, "config": CONFIG} | run_info
    torch.save({RUN_KEY: info, "twinkle_module": {"rollouts_done": 2}}, path)
    return path


# --- which checkpoint -------------------------------------------------------------------------------
def test_auto_starts_fresh_in_an_empty_directory_and_resumes_its_own_checkpoint(tmp_path):
    assert resume.find_start("auto", tmp_path).checkpoint is None
    path = _checkpoint(tmp_path)
    start = resume.find_start("auto", tmp_path)
    assert start.checkpoint == path and start.step == 8 and start.csv_rows == 5 and start.rollouts_done == 2


def test_a_path_names_a_checkpoint_file_or_a_run_directory(tmp_path):
    path = _checkpoint(tmp_path / "old")
    for given in (path, tmp_path / "old", path.parent):
        assert resume.find_start(str(given), tmp_path / "new").checkpoint == path
    with pytest.raises(UserError, match=r"resume=/no/such\.ckpt: no checkpoint at /no/such\.ckpt"):
        resume.find_start("/no/such.ckpt", tmp_path)


def test_null_refuses_a_directory_that_holds_a_checkpoint(tmp_path):
    assert resume.find_start(None, tmp_path).checkpoint is None
    _checkpoint(tmp_path)
    with pytest.raises(ValueError, match="resume=null, but .* already holds a checkpoint.*resume=auto"):
        resume.find_start(None, tmp_path)


def test_a_broken_or_foreign_file_is_named(tmp_path):
    path = last_checkpoint(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"half a checkpoint")
    with pytest.raises(ValueError, match=f"resume: {path} is not a readable checkpoint"):
        resume.find_start("auto", tmp_path)
    torch.save({"state_dict": {}}, path)
    with pytest.raises(ValueError, match="is not a twinkle_exp checkpoint"):
        resume.find_start("auto", tmp_path)
    torch.save({RUN_KEY: {"format": FORMAT + 1}}, path)
    with pytest.raises(ValueError, match=f"checkpoint format {FORMAT + 1}"):
        resume.find_start("auto", tmp_path)


# --- refusals ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "key, value", [("loss", {"_target_": "SAPOLoss", "beta": 0.01}), ("task", {"n": 2}), ("seed", 1)]
)
def test_another_experiments_checkpoint_is_refused_naming_the_setting(tmp_path, key, value):
    _checkpoint(tmp_path)
    start = resume.find_start("auto", tmp_path)
    with pytest.raises(ValueError, match=f"resume refused: .*belongs to another experiment \\({key}"):
        resume.check_resume_config(start, CONFIG | {key: value})


def test_other_settings_may_change_and_are_listed(tmp_path, caplog):
    _checkpoint(tmp_path)
    start = resume.find_start("auto", tmp_path)
    resume.check_resume_config(start, CONFIG | {"trainer": {"max_steps": 16}})
    assert "trainer.max_steps 8 -> 16" in caplog.text


def test_a_missing_warm_start_cache_or_another_reference_is_refused(tmp_path):
    cache = tmp_path / "warmup-abc.pt"
    _checkpoint(tmp_path / "run", reference_digest="d1", warmup={"path": str(cache), "cached": False})
    start = resume.find_start("auto", tmp_path / "run")
    with pytest.raises(UserError, match=f"warm-start cache {cache} .* is missing. Restore that file"):
        resume.check_warmup_cache(start)
    cache.write_bytes(b"x")
    resume.check_warmup_cache(start)
    resume.check_reference(start, "d1")
    with pytest.raises(ValueError, match="frozen reference built now differs"):
        resume.check_reference(start, "d2")


def test_the_weights_digest_sees_a_one_bit_change():
    model = torch.nn.Linear(3, 2)
    before = weights_digest(model)
    with torch.no_grad():
        model.weight[0, 0] = torch.nextafter(model.weight[0, 0], torch.tensor(1.0))
    assert weights_digest(model) != before and weights_digest(None) is None


# --- run.json and metrics.csv --------------------------------------------------------------------------
def test_run_json_records_each_attempt_and_keeps_the_wandb_run(tmp_path):
    job = JobInfo(output_dir=tmp_path, overrides=["loss=grpo"])
    first = RunStatus(job, seed=0)
    first.finish("interrupted", error="SIGTERM at optimizer step 3", step=3)
    second = RunStatus(job, seed=0, resumed_from="ckpt", start_step=3)
    assert second.wandb_id == first.wandb_id
    second.finish("finished", final={"steps": 8})
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["status"] == "finished" and data["attempt"] == 2 and "step" not in data
    assert [a["status"] for a in data["attempts"]] == ["interrupted", "finished"]
    assert data["attempts"][1]["resumed_from"] == "ckpt" and data["attempts"][1]["start_step"] == 3
    assert data["wall_time_s"] == pytest.approx(sum(a["wall_time_s"] for a in data["attempts"]), abs=0.02)
    assert RunStatus(job, seed=0).wandb_id != first.wandb_id  # a fresh start is a new wandb run


def test_metrics_csv_is_appended_to_and_keeps_only_the_checkpoints_rows(tmp_path):
    logger = MetricsCSVLogger(tmp_path)
    for step in range(4):
        logger.log_metrics({"a": float(step)}, step=step)
        logger.save()
    logger.log_metrics({"b": 1.0}, step=4)  # a new column: the file is rewritten, through a rename
    assert logger.rows_written() == 5
    assert truncate_rows(tmp_path / "metrics.csv", 3) == 3  # the checkpoint had seen 3 rows
    again = MetricsCSVLogger(tmp_path)  # Lightning's CSVLogger would delete the file here
    again.log_metrics({"a": 9.0}, step=3)
    assert again.rows_written() == 4
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines == ["a,b,step", "0.0,,0", "1.0,,1", "2.0,,2", "9.0,,3"]


def test_truncating_drops_a_row_cut_off_by_a_crash(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("a,step\n1.0,0\n2.0,1\n3.\x00\x00")
    assert truncate_rows(path, 2) == 2
    assert path.read_text().splitlines() == ["a,step", "1.0,0", "2.0,1"]


# --- stopping: the resume command, the exit, SLURM ------------------------------------------------------
def test_the_resume_command_quotes_what_hydra_and_the_shell_would_misread():
    job = JobInfo(Path("/r/0_loss=grpo,seed=0"), task_overrides=["loss=grpo", "resume=auto", "seed=0"])
    assert resume_command(job, argv=[]) == (
        "python -m twinkle_exp loss=grpo seed=0 \"hydra.run.dir='/r/0_loss=grpo,seed=0'\""
    )
    sweep = JobInfo(Path("/s/1_seed=1"), multirun=True, sweep_dir="/s", task_overrides=["seed=1"])
    assert resume_command(sweep, argv=["-m", "seed=0,1", "hydra.sweep.dir=/old"]) == (
        'python -m twinkle_exp -m "seed=0,1" hydra.sweep.dir=/s'
    )


def test_a_signal_ends_as_interrupted_with_the_resume_command_and_its_exit_code(tmp_path, capsys):
    job = JobInfo(tmp_path, task_overrides=["debug=fast"])
    status = RunStatus(job, seed=0)
    with pytest.raises(SystemExit) as exit_:
        end_stopped_run(status, job, signal.SIGINT, 5, tmp_path / "last.ckpt", is_slurm=False)
    assert exit_.value.code == 130
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["status"] == "interrupted" and data["error"] == "SIGINT at optimizer step 5"
    assert data["resume_command"] == f"python -m twinkle_exp debug=fast hydra.run.dir={tmp_path}"
    assert data["checkpoint"] == str(tmp_path / "last.ckpt") and data["requeued"] is False
    assert f"resume with:\n  {data['resume_command']}" in capsys.readouterr().err


def test_non_finite_values_end_as_failed(tmp_path):
    status = RunStatus(JobInfo(tmp_path), seed=0)
    with pytest.raises(NonFiniteError, match="stopped at optimizer step 4: .*; checkpoint /c"):
        end_stopped_run(
            status, JobInfo(tmp_path), None, 4, Path("/c"), False, "stopped at optimizer step 4: ..."
        )
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "failed"


def test_slurms_warning_signal_requeues_the_job(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "70")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert not signals.requeue_on_slurm(signal.SIGTERM, is_slurm=True)  # not the warning signal
    assert not signals.requeue_on_slurm(signal.SIGUSR1, is_slurm=False)  # not under SLURM
    assert signals.requeue_on_slurm(signal.SIGUSR1, is_slurm=True)
    assert calls.read_text() == "requeue 70_3\n"
