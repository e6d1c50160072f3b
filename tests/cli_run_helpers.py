"""Running `python -m twinkle_exp` in a subprocess and reading what the run left: shared by the resume tests."""

from __future__ import annotations

import contextlib
import csv
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch


def run_twinkle(args: list[str], cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m twinkle_exp *args` in `cwd`, to completion."""
    return subprocess.run(
        [sys.executable, "-m", "twinkle_exp", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_twinkle(args: list[str], cwd: Path, env: dict) -> subprocess.Popen:
    """`python -m twinkle_exp *args` as the leader of a process group of its own, as a shell starts it."""
    return subprocess.Popen(
        [sys.executable, "-m", "twinkle_exp", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@contextlib.contextmanager
def mounted_tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """A size-limited tmpfs at `mnt` (root only: the test skips, saying why, where `mount` is refused)."""
    import pytest

    mnt.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def check_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


def metric_rows(run_dir: Path) -> list[dict[str, str]]:
    """metrics.csv's rows, without empty cells and the wall-clock columns (time/*: never equal twice)."""
    with open(run_dir / "metrics.csv", newline="") as f:
        return [
            {k: v for k, v in r.items() if v != "" and not k.startswith("time/")} for r in csv.DictReader(f)
        ]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    """The policy's weights in the run's checkpoints/last.ckpt."""
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    return saved["state_dict"]


def wait_for_step(run_dir: Path, step: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Wait until the running `proc` has logged a row at optimizer step >= `step` in its metrics.csv."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "the run ended before it could be interrupted"
        try:
            with open(run_dir / "metrics.csv", newline="") as f:
                if any(r.get("step") and int(r["step"]) >= step for r in csv.DictReader(f)):
                    return
        except (OSError, ValueError, csv.Error):
            pass
        time.sleep(0.05)
    raise AssertionError(f"no row with step >= {step} within {timeout} s")
