"""A refused start leaves its run directory exactly as it was: a snapshot taken before anything is written.

Hydra writes `.hydra/*.yaml` and appends to the job's log before the task function runs, and a run writes
run.json, trims metrics.csv and starts wandb before every refusal is known (the rebuilt reference is checked
after the warm-start). So the directory's files are read before Hydra touches them (`TakeSnapshot`, a Hydra
callback in RUN mode; under `-m` the snapshot is taken when the job starts, after Hydra's own files), and a
start refused with a `UserError` puts back every file it changed and removes every file it added.

Files larger than `MAX_BYTES` (checkpoints) are listed but not read: nothing before training writes them.
Only the standard library and Hydra are imported, so `cli` can use this before the slow imports.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

MAX_BYTES = 64 * 2**20


class Snapshot:
    """The files, links and folders under `run_dir` when it was taken (`run_dir` may not exist yet)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir).absolute()
        self.existed = self.run_dir.is_dir()
        self.dirs: set[Path] = set()
        self.links: dict[Path, str] = {}
        self.files: dict[Path, tuple[bytes | None, int]] = {}  # path -> (content or None if large, mtime_ns)
        for path in self._walk():
            if path.is_symlink():
                self.links[path] = os.readlink(path)
            elif path.is_dir():
                self.dirs.add(path)
            elif path.is_file():
                st = path.stat()
                content = path.read_bytes() if st.st_size <= MAX_BYTES else None
                self.files[path] = (content, st.st_mtime_ns)

    def _walk(self) -> list[Path]:
        if not self.run_dir.is_dir():
            return []
        found = []
        for root, dirs, files in os.walk(self.run_dir):
            found += [Path(root) / d for d in dirs] + [Path(root) / f for f in files]
        return found

    def restore(self) -> None:
        """Put back what changed since the snapshot; remove what was added (the folder too, if it was new).

        Global rank 0 alone restores: every rank of a run shares its directory, and the others' snapshots
        may have been taken after rank 0's Hydra wrote there."""
        if _launch_rank() > 0:
            return
        if not self.existed:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            return
        for path in sorted(self._walk(), key=lambda p: len(p.parts), reverse=True):  # deepest first
            if path.is_symlink():
                if self.links.get(path) != os.readlink(path):
                    path.unlink()
            elif path.is_dir():
                if path not in self.dirs:
                    shutil.rmtree(path, ignore_errors=True)
            elif path not in self.files:
                path.unlink()
        for path, target in self.links.items():
            if not path.is_symlink():
                path.symlink_to(target)
        for path, (content, mtime_ns) in self.files.items():
            if content is None or (path.is_file() and path.read_bytes() == content):
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".restore")
            tmp.write_bytes(content)
            os.replace(tmp, path)
            os.utime(path, ns=(mtime_ns, mtime_ns))


_taken: dict[Path, Snapshot] = {}


def _launch_rank() -> int:
    # As Lightning guesses it before the trainer exists: the first of these variables a launcher set.
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def snapshot(run_dir: Path) -> Snapshot:
    """The snapshot `TakeSnapshot` took of `run_dir` before Hydra wrote there, else one taken now."""
    key = Path(run_dir).absolute()
    return _taken.pop(key, None) or Snapshot(key)


def restore_taken(run_dir: Path) -> None:
    """Undo Hydra's writes for a start refused before `train` (a config problem), when a snapshot exists."""
    taken = _taken.pop(Path(run_dir).absolute(), None)
    if taken is not None:
        taken.restore()


class TakeSnapshot(Callback):
    """Hydra callback (conf/config.yaml `hydra.callbacks`): a single run's directory, before Hydra writes."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        run_dir = Path(str(config.hydra.run.dir)).absolute()  # `now` is cached: the job's directory
        _taken[run_dir] = Snapshot(run_dir)
