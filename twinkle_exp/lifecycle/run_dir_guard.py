"""A refused start leaves its run directory exactly as it was: a snapshot taken before anything is written.

Hydra makes the directory and appends to the job's log before the task function runs (its `.hydra/` files are
the project's since issue 48: `tracking.hydra_record`, written when the run begins), and a run writes
run.json, trims metrics.csv and starts wandb before every refusal is known (the rebuilt reference is checked
after the warm-start). So the directory's files are read before Hydra touches them (`TakeSnapshot`, a Hydra
callback in RUN mode; under `-m` the snapshot is taken when the job starts, after Hydra made its folder and
log), and a start refused with a `UserError` puts back every file it changed and removes every file it added.

Files larger than `MAX_BYTES` (checkpoints) are listed but not read: nothing before training writes them.
Only the standard library and Hydra are imported, so `cli` can use this before the slow imports.

The same callback takes the directory's lock (`run_lock`) before Hydra writes there: a second process on a
directory in use is refused before it touches a file of it. Under `-m`, `on_multirun_start` notes which
folders the sweep directory held, so that a refused job's new directory is removed.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from twinkle_exp.lifecycle import run_lock

MAX_BYTES = 64 * 2**20


class Snapshot:
    """The files, links and folders under `run_dir` when it was taken (`run_dir` may not exist yet)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir).absolute()
        self.existed = self.run_dir.is_dir()
        self.parents_existing = {p for p in self.run_dir.parents if p.is_dir()}
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
        if run_lock.launch_rank() > 0:
            return
        if not self.existed:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            for parent in self.run_dir.parents:  # the folders made for it (outputs/<date>/), if empty now
                if parent in self.parents_existing:
                    break
                try:
                    parent.rmdir()
                except OSError:
                    break
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
# Under -m: the sweep directory's folders before the sweep started.
_sweep_root: list[Path] = []  # the sweep directory, under -m
_sweep_dirs: set[Path] = set()


def snapshot(run_dir: Path) -> Snapshot:
    """The snapshot `TakeSnapshot` took of `run_dir` before Hydra wrote there, else one taken now (a sweep's
    job: corrected with which folders `on_multirun_start` saw before Hydra made the job's)."""
    key = Path(run_dir).absolute()
    taken = _taken.pop(key, None)
    if taken is not None:
        return taken
    taken = Snapshot(key)
    if _sweep_root and key.is_relative_to(_sweep_root[0]):
        root = _sweep_root[0]
        taken.existed = key in _sweep_dirs
        # Folders Hydra made for this job (an override holding "/") go with it; the sweep's own stays.
        taken.parents_existing = {
            p for p in key.parents if p in _sweep_dirs or p == root or not p.is_relative_to(root)
        }
    return taken


def restore_taken(run_dir: Path) -> None:
    """Undo Hydra's writes for a start refused before `train` (a config problem)."""
    snapshot(run_dir).restore()


def _refuse_in_use(exc: Exception) -> None:
    print(f"twinkle_exp: {exc}", file=sys.stderr, flush=True)
    sys.exit(2)


class TakeSnapshot(Callback):
    """Hydra callback (conf/config.yaml `hydra.callbacks`): a single run's directory, before Hydra writes."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        run_dir = Path(str(config.hydra.run.dir)).absolute()  # `now` is cached: the job's directory
        taken = Snapshot(run_dir)
        try:
            run_lock.hold(run_dir)
        except ValueError as exc:  # in use: refused before Hydra writes there, so nothing to put back
            _refuse_in_use(exc)
        _taken[run_dir] = taken

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()
        _sweep_root[:] = [sweep_dir]
        _sweep_dirs.clear()
        for root, dirs, files in os.walk(sweep_dir):
            _sweep_dirs.add(Path(root))
            if ".hydra" in dirs or "run.json" in files:
                dirs[:] = []  # a job: its subfolders (wandb, checkpoints) hold no further jobs
