"""metrics.csv that survives a resume: appended to, never deleted, rewritten only through a rename.

Lightning's CSVLogger deletes an existing metrics.csv when it starts, and rewrites the file in place when a
new column appears (a crash then loses it). A resumed run instead keeps the rows its checkpoint had seen
(`keep_rows`), drops the ones logged after the checkpoint (the resumed run logs them again, identically),
and appends.
"""

from __future__ import annotations

import csv
import io
import logging
import os
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from twinkle_exp.tracking.disk_space import full_error, is_full

log = logging.getLogger(__name__)


def _csv_text(fieldnames: list[str], rows: list[dict[str, Any]], header: bool = True) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fieldnames)
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _write_atomically(path: Path, fieldnames: list[str], rows: list[dict[str, str]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    text = _csv_text(fieldnames, rows)
    try:
        with open(tmp, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        tmp.unlink(missing_ok=True)  # the file it would have replaced is as it was
        if is_full(exc):
            raise full_error(path, len(text.encode()), exc) from None
        raise
    os.replace(tmp, path)


def truncate_rows(path: Path, keep_rows: int) -> int:
    """Keep the header and the first `keep_rows` data rows of the CSV file at `path`; returns the rows kept."""
    if not path.is_file():
        return 0
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fieldnames = list(reader.fieldnames or [])
        rows = []
        try:
            for row in reader:
                rows.append(row)
        except csv.Error:
            pass  # a row cut off by a crash (NUL bytes): it came after the checkpoint anyway
    if not fieldnames:
        path.unlink()
        return 0
    if len(rows) > keep_rows:
        _write_atomically(path, fieldnames, rows[:keep_rows])
    elif len(rows) < keep_rows:
        log.warning(
            "%s holds %d rows, the checkpoint saw %d: rows before it were lost (the file was replaced, or "
            "a machine that powered off did not write them); the resumed run appends after row %d",
            path,
            len(rows),
            keep_rows,
            len(rows),
        )
    return min(len(rows), keep_rows)


class _AppendingWriter(ExperimentWriter):
    """Lightning's writer, starting from the file's header and row count instead of deleting it."""

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        self.rows = 0
        path = Path(self.metrics_file_path)
        if path.is_file():
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                self.metrics_keys = sorted(reader.fieldnames or [])
                self.rows = sum(1 for _ in reader)

    def _check_log_dir_exists(self) -> None:
        pass  # the run directory holds run.json, .hydra and checkpoints; metrics.csv is appended to

    def save(self) -> None:
        pending = len(self.metrics)
        try:
            super().save()
        except OSError as exc:
            if not is_full(exc):
                raise
            # Rows are appended: a torn last line is what a reader skips (report.loading.metrics_csv).
            keys = sorted({k for row in self.metrics for k in row} | set(self.metrics_keys))
            needed = len(_csv_text(keys, self.metrics, header=False).encode())
            raise full_error(Path(self.metrics_file_path), needed, exc) from None
        self.rows += pending

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        path = Path(self.metrics_file_path)
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        _write_atomically(path, fieldnames, rows)


class MetricsCSVLogger(CSVLogger):
    """`<save_dir>/metrics.csv`, appended to; `rows_written()` counts its data rows (for checkpoints)."""

    def __init__(self, save_dir: str | os.PathLike) -> None:
        super().__init__(save_dir=str(save_dir), name="", version="")

    @property
    @rank_zero_experiment
    def experiment(self) -> _AppendingWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment

    def rows_written(self) -> int:
        """Data rows in metrics.csv once what was logged is flushed (0 on ranks other than global rank 0).

        The rows are on disk when this returns: the checkpoint that records their number must not outlive
        them in a machine that powers off."""
        self.save()
        if not isinstance(self.experiment, _AppendingWriter):
            return 0
        path = Path(self.experiment.metrics_file_path)
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return self.experiment.rows
