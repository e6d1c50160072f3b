"""What a run writes is on disk before anything that refers to it: run.json's temporary file before its
rename, metrics.csv's rows before the checkpoint that counts them; and a metrics.csv shorter than its
checkpoint says is not resumed silently."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from twinkle_exp.tracking.metrics_file import MetricsCSVLogger, truncate_rows
from twinkle_exp.tracking.run_json import JobInfo, RunStatus


def _record_syncs_and_renames(monkeypatch) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def recording_fsync(fd: int) -> None:
        events.append(("fsync", Path(os.readlink(f"/proc/self/fd/{fd}")).name))
        fsync(fd)

    def recording_replace(src, dst) -> None:
        events.append(("rename", f"{Path(src).name} -> {Path(dst).name}"))
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    return events


def test_run_json_is_on_disk_before_its_rename(tmp_path, monkeypatch):
    events = _record_syncs_and_renames(monkeypatch)
    status = RunStatus(JobInfo(tmp_path), seed=0)
    status.finish("finished")
    assert events == [("fsync", "run.tmp"), ("rename", "run.tmp -> run.json")] * 2


def test_the_rows_a_checkpoint_counts_are_on_disk_when_it_counts_them(tmp_path, monkeypatch):
    logger = MetricsCSVLogger(tmp_path)
    logger.log_metrics({"a": 1.0}, step=0)
    events = _record_syncs_and_renames(monkeypatch)
    assert logger.rows_written() == 1
    assert events == [("fsync", "metrics.csv")]


def test_a_metrics_file_shorter_than_its_checkpoint_says_is_named_in_a_warning(tmp_path, caplog):
    path = tmp_path / "metrics.csv"
    path.write_text("a,step\n1.0,0\n2.0,1\n")
    with caplog.at_level(logging.WARNING):
        assert truncate_rows(path, 5) == 2
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert str(path) in record.getMessage() and "holds 2 rows, the checkpoint saw 5" in record.getMessage()
    assert path.read_text() == "a,step\n1.0,0\n2.0,1\n"  # kept as it was
