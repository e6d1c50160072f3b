"""The run's lifecycle under hostile use, in process: a refused start puts the run directory back byte for
byte, a checkpoint missing its entries or from another process count is refused in one line, a signal
stops the warm-start within a step and leaves no cache, and DDP without GPUs or a device count is refused."""

from __future__ import annotations

import dataclasses
import os
import signal
from pathlib import Path

import lightning as L
import pytest
import torch

from twinkle_exp.config.schema import TrainerConfig, WarmupConfig
from twinkle_exp.errors import UserError
from twinkle_exp.lifecycle import resume, run_dir_guard, signals
from twinkle_exp.lifecycle.checkpoints import FORMAT, RUN_KEY, last_checkpoint
from twinkle_exp.parallel.ranks import check_data_parallel
from twinkle_exp.policy.build import tiny_policy
from twinkle_exp.tasks import ReverseTask
from twinkle_exp.training import warmup


def _tree(root) -> dict[str, bytes | str]:
    """Every file's bytes and every link's target under `root`, by relative path."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                out[rel] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                out[rel] = Path(path).read_bytes()
            else:
                out[rel] = "dir"
    return out


# --- the snapshot a refused start restores ----------------------------------------------------------------
def test_a_refused_start_puts_back_every_file_and_removes_what_it_added(tmp_path):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("loss: grpo\n")
    (run / "run.json").write_text('{"status": "finished"}')
    (run / "metrics.csv").write_text("step,a\n1,0.5\n2,0.6\n")
    (run / "cli.log").write_text("first attempt\n")
    (run / "wandb").mkdir()
    (run / "wandb" / "latest-run").symlink_to("offline-run-1")
    mtime = os.stat(run / "run.json").st_mtime_ns
    before = _tree(run)
    taken = run_dir_guard.Snapshot(run)

    (run / ".hydra" / "config.yaml").write_text("loss: sapo\n")  # what Hydra and a start-up would do
    (run / "run.json").write_text('{"status": "failed"}')
    (run / "metrics.csv").write_text("step,a\n")
    with open(run / "cli.log", "a") as f:
        f.write("refused\n")
    (run / "wandb" / "latest-run").unlink()
    (run / "wandb" / "latest-run").symlink_to("offline-run-2")
    (run / "wandb" / "offline-run-2" / "files").mkdir(parents=True)
    (run / "wandb" / "offline-run-2" / "files" / "x").write_text("x")
    taken.restore()
    assert _tree(run) == before
    assert os.stat(run / "run.json").st_mtime_ns == mtime


def test_a_directory_that_did_not_exist_is_removed_again(tmp_path):
    taken = run_dir_guard.Snapshot(tmp_path / "new")
    (tmp_path / "new" / ".hydra").mkdir(parents=True)
    (tmp_path / "new" / ".hydra" / "config.yaml").write_text("x")
    taken.restore()
    assert not (tmp_path / "new").exists()


def test_only_global_rank_0_restores(tmp_path, monkeypatch):
    taken = run_dir_guard.Snapshot(tmp_path)
    (tmp_path / "rank1.log").write_text("x")
    monkeypatch.setenv("RANK", "1")
    taken.restore()
    assert (tmp_path / "rank1.log").exists()


# --- checkpoints that cannot be resumed -------------------------------------------------------------------
def test_a_checkpoint_without_its_run_entries_is_refused_naming_the_file(tmp_path):
    path = last_checkpoint(tmp_path)
    path.parent.mkdir(parents=True)
    torch.save({RUN_KEY: {"format": FORMAT}, "twinkle_module": {}}, path)  # no config, no rollouts_done
    with pytest.raises(UserError, match=f"resume: {path} is not a complete twinkle_exp checkpoint"):
        resume.find_start("auto", tmp_path)
    torch.save({RUN_KEY: "format 1"}, path)
    with pytest.raises(UserError, match=f"resume: {path} has checkpoint format"):
        resume.find_start("auto", tmp_path)


def test_a_checkpoint_of_another_process_count_is_refused_before_the_warm_start(tmp_path):
    start = resume.Start(checkpoint=tmp_path / "last.ckpt", run_info={"world_size": 1})
    resume.check_world_size(start, 1)
    resume.check_world_size(resume.Start(), 2)  # a fresh start: any count
    with pytest.raises(UserError, match="written by 1 process\\(es\\) and this run has 2: resume on as many"):
        resume.check_world_size(start, 2)


# --- a signal during the warm-start ---------------------------------------------------------------------
def test_a_signal_stops_the_warm_start_within_a_step_and_nothing_is_cached(tmp_path, monkeypatch):
    batches = []
    real = warmup.supervised_batch

    def batch_then_signal(policy, examples):
        batches.append(len(examples))
        if len(batches) == 3:
            os.kill(os.getpid(), signal.SIGINT)  # arrives in the middle of the third step
        return real(policy, examples)

    monkeypatch.setattr(warmup, "supervised_batch", batch_then_signal)
    cfg = dataclasses.replace(WarmupConfig(), steps=1000, batch_size=4, cache_dir=str(tmp_path))
    torch.manual_seed(0)
    policy = tiny_policy(d_model=16, n_layers=1, n_heads=2)
    signals.install()
    try:
        warm = warmup.warm_start(policy, ReverseTask(num_validation=8), cfg, "k")
        assert signals.received() == signal.SIGINT
    finally:
        signals.restore()
    assert len(batches) == 3, "the step under way finishes, no further one starts"
    assert warm == {"path": None, "cached": False, "interrupted": True}
    assert not list(tmp_path.glob("warmup-*.pt")) and not list(tmp_path.glob("*.tmp"))


def test_a_signal_stops_the_other_ranks_waiting_for_the_warm_start(tmp_path, monkeypatch):
    cfg = dataclasses.replace(WarmupConfig(), steps=1, batch_size=4, cache_dir=str(tmp_path))
    policy = tiny_policy(d_model=16, n_layers=1, n_heads=2)
    signals.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        warm = warmup.warm_start(policy, ReverseTask(num_validation=8), cfg, "k", trains=False)
    finally:
        signals.restore()
    assert warm["interrupted"] is True


# --- data parallelism that would not be ----------------------------------------------------------------
def test_ddp_without_gpus_or_a_device_count_is_refused_in_one_line():
    cfg = TrainerConfig(strategy="ddp", accelerator="auto", devices="auto")
    one = L.Trainer(accelerator="cpu", devices="auto", strategy="ddp", logger=False)
    with pytest.raises(UserError, match="trainer.strategy=ddp found no GPU.*trainer.devices=N"):
        check_data_parallel(one, cfg)
    two = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    check_data_parallel(two, dataclasses.replace(cfg, devices=2))  # what docs/scaling-out.md says to run
    check_data_parallel(one, dataclasses.replace(cfg, strategy="auto"))  # one process was asked for
