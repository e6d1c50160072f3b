"""The fault-injection harness: start `python -m twinkle_exp`, SIGKILL it at a chosen point, read what it left.

A kill point (`Trigger`) is a delay after the process started (imports, Hydra, the start checks), a delay
after the attempt first wrote run.json (the warm-start, the steps, the checkpoints, the end), or the n-th
appearance of a file: a temporary name that lives only while a checkpoint, metrics.csv, run.json or the
warm-start cache is written, or the cache's lock. The directories are polled every millisecond, so an
event kill lands while that file is being written or just after its rename.
`damaged_files` then says which result file no longer parses.
"""

from __future__ import annotations

import contextlib
import csv
import fnmatch
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import OmegaConf

POLL_S = 0.001


@dataclass(frozen=True)
class Trigger:
    """When to kill: `after_s` past the start (`anchor="start"`) or past the attempt's first run.json write
    (`anchor="run.json"`), or at the `nth` appearance of a file matching `pattern` (`anchor="file"`)."""

    label: str
    anchor: str
    after_s: float = 0.0
    pattern: str = ""
    nth: int = 1


@dataclass
class Attempt:
    killed: bool
    returncode: int | None
    stderr: str
    seconds: float

    @property
    def outcome(self) -> str:
        """killed / finished / refused (exit 2, one line, no traceback) / failed."""
        if self.killed:
            return "killed"
        if self.returncode == 0:
            return "finished"
        said = [line for line in self.stderr.splitlines() if line.startswith("twinkle_exp:")]
        if self.returncode == 2 and "Traceback" not in self.stderr and len(said) == 1:
            return "refused"
        return "failed"


def _listing(dirs: list[Path]) -> set[str]:
    names: set[str] = set()
    for d in dirs:
        with contextlib.suppress(OSError):
            names.update(f"{d.name}/{n}" for n in os.listdir(d))
    return names


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def run_once(args: list[str], cwd: Path, env: dict, watch: list[Path], trigger: Trigger | None) -> Attempt:
    """One attempt of `python -m twinkle_exp *args`, killed (its whole process group) at `trigger`.

    `watch`: the run directory first (its run.json is the "run.json" anchor), then the others to poll."""
    err_path = cwd / f"stderr-{time.monotonic_ns()}.txt"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "twinkle_exp", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    start = time.monotonic()
    seen: set[str] = _listing(watch)
    appeared, anchor_at = 0, start if trigger and trigger.anchor == "start" else None
    status_file = watch[0] / "run.json"
    first_status = _identity(status_file)
    killed = False
    while proc.poll() is None and trigger is not None:
        now_seen = _listing(watch)
        new = now_seen - seen
        seen = now_seen
        if anchor_at is None and trigger.anchor == "run.json" and _identity(status_file) != first_status:
            anchor_at = time.monotonic()
        if trigger.anchor == "file":
            appeared += sum(1 for n in new if fnmatch.fnmatch(n, trigger.pattern))
            fire = appeared >= trigger.nth
        else:
            fire = anchor_at is not None and time.monotonic() - anchor_at >= trigger.after_s
        if fire:
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(POLL_S)
    proc.wait(timeout=900)
    attempt = Attempt(killed, proc.returncode, err_path.read_text(), time.monotonic() - start)
    err_path.unlink()
    return attempt


def damaged_files(run: Path, cache: Path) -> list[str]:
    """Each result file that does not read back whole: run.json, metrics.csv, the checkpoint, the caches,
    and Hydra's record of the config (the report reads it)."""
    problems = []
    for path in sorted(run.glob(".hydra/*.yaml")):
        try:
            OmegaConf.load(path)
        except Exception as exc:
            problems.append(f".hydra/{path.name}: {type(exc).__name__}: {exc}"[:200])
    if (run / "run.json").exists():
        try:
            json.loads((run / "run.json").read_text())
        except ValueError as exc:
            problems.append(f"run.json: {exc}")
    metrics = run / "metrics.csv"
    if metrics.exists():
        text = metrics.read_text()
        rows = list(csv.reader(text.splitlines()))
        if text and not text.endswith("\n"):
            problems.append(f"metrics.csv: its last line is cut off: {text.splitlines()[-1][:80]!r}")
        elif rows and any(len(r) != len(rows[0]) for r in rows[1:]):
            problems.append("metrics.csv: a row with another number of fields than the header")
    ckpt = run / "checkpoints" / "last.ckpt"
    files = [(ckpt, False)] if ckpt.exists() else []
    files += [(p, True) for p in cache.glob("warmup-*.pt")]
    for path, weights_only in files:
        try:
            torch.load(path, map_location="cpu", weights_only=weights_only)
        except Exception as exc:
            problems.append(f"{path.name}: {type(exc).__name__}: {exc}"[:200])
    return problems


def leftovers(run: Path, cache: Path) -> list[str]:
    """Temporary files a kill left behind (harmless to the results: counted, not failed)."""
    found = [*run.glob("*.tmp"), *run.glob("checkpoints/*.tmp"), *cache.glob("*.tmp")]
    return sorted(str(p.relative_to(p.parent.parent)) for p in found)


def time_phases(args: list[str], cwd: Path, env: dict, run: Path) -> tuple[float, float]:
    """An uninterrupted attempt's seconds until it first wrote run.json, and until it exited."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "twinkle_exp", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    status_at = None
    while proc.poll() is None:
        if status_at is None and (run / "run.json").exists():
            status_at = time.monotonic() - start
        time.sleep(POLL_S * 10)
    _, err = proc.communicate()
    assert proc.returncode == 0 and status_at is not None, err[-3000:]
    return status_at, time.monotonic() - start
