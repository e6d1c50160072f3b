"""In process: the digest beside a file matches it whenever a crash comes, run.json's last rewrite fits in
place on a full disk, a second lock on a directory is refused, and an ended run is told from a killed one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cli_run_helpers import mounted_tmpfs

from twinkle_exp.errors import UserError
from twinkle_exp.lifecycle import previous_run, resume, run_lock
from twinkle_exp.models import cache_files
from twinkle_exp.models.cache_files import digest_file, digest_problem, read_digests, replace_with_digest
from twinkle_exp.tracking.run_json import JobInfo, RunStatus


# --- digests ----------------------------------------------------------------------------------------------
def test_every_moment_of_a_replacement_leaves_a_file_its_digest_accepts(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    tmp = tmp_path / "last.ckpt.tmp"
    tmp.write_bytes(b"first")
    replace_with_digest(tmp, path)
    assert digest_problem(path) is None and len(read_digests(path)) == 1

    # A crash after the digest file accepts both, before the rename: the old file is still accepted.
    tmp.write_bytes(b"second")
    real_replace = os.replace

    def crash_on_the_checkpoint_rename(src, dst):
        if str(src) == str(tmp):
            raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(cache_files.os, "replace", crash_on_the_checkpoint_rename)
    with pytest.raises(KeyboardInterrupt):
        replace_with_digest(tmp, path)
    monkeypatch.setattr(cache_files.os, "replace", real_replace)
    assert path.read_bytes() == b"first" and digest_problem(path) is None
    # ... and the new file, had the rename happened, would be too.
    os.replace(tmp, path)
    assert digest_problem(path) is None

    path.write_bytes(b"sec0nd")  # a changed byte
    assert "says" in digest_problem(path)


def test_a_file_written_before_digests_is_accepted_and_gets_one_when_replaced(tmp_path):
    path = tmp_path / "warmup-k.pt"
    path.write_bytes(b"old")
    assert read_digests(path) is None and digest_problem(path) is None
    (tmp_path / "new.tmp").write_bytes(b"new")
    replace_with_digest(tmp_path / "new.tmp", path)
    assert digest_file(path).read_text().split() == [cache_files.sha256_of(path), "warmup-k.pt"]


# --- run.json on a full disk --------------------------------------------------------------------------------
@pytest.fixture
def full_disk(tmp_path):
    with mounted_tmpfs(tmp_path / "disk", "1m") as mnt:
        yield mnt


def test_run_json_says_failed_even_when_no_block_is_left(full_disk):
    status = RunStatus(JobInfo(output_dir=full_disk / "run"), seed=0)
    size = (full_disk / "run" / "run.json").stat().st_size
    with open(full_disk / "filler", "wb") as f, pytest.raises(OSError):  # every free block taken
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    status.finish("failed", error="DiskFullError: could not write x: No space left on device " + "x" * 500)
    data = json.loads((full_disk / "run" / "run.json").read_text())
    assert data["status"] == "failed" and data["error"].startswith("DiskFullError")
    assert (full_disk / "run" / "run.json").stat().st_size == size, "not rewritten in place"
    assert not list((full_disk / "run").glob("*.tmp"))


# --- the lock and the previous run --------------------------------------------------------------------------
def test_a_locked_directory_is_refused_naming_the_holder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    code = (
        f"import fcntl, os, time; fd = os.open({str(run)!r}, os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); "
        "print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=f"{run} is in use: process {holder.pid} is running there"):
            run_lock.hold(run)
    finally:
        holder.kill()
        holder.wait()
    run_lock.hold(run)  # the kernel let go of it with the process
    run_lock.release()


@pytest.mark.parametrize(
    ("status", "step", "continues"),
    [("interrupted", 0, True), ("failed", 0, True), ("interrupted", 3, False), ("finished", 0, False)],
)
def test_an_ended_run_without_a_checkpoint_restarts_only_when_it_never_trained(
    tmp_path, status, step, continues
):
    previous = {"status": status, "step": step, "loss": "grpo", "seed": 0}
    why = previous_run._why_not_continued(tmp_path, previous, resume.Start(), {})
    assert (why is None) == continues


def test_the_report_does_not_take_a_run_moved_aside_for_a_job_of_its_sweep(tmp_path):
    from twinkle_exp.report.loading.runs import find_job_dirs
    from twinkle_exp.tracking.run_json import MOVED_ASIDE, RUN_JSON

    for name in ("0_seed=0", f"0_seed=0{MOVED_ASIDE}20261202-070000", "1_seed=1"):
        (tmp_path / name).mkdir()
        (tmp_path / name / RUN_JSON).write_text("{}")
    assert [p.name for p in find_job_dirs(tmp_path)] == ["0_seed=0", "1_seed=1"]
