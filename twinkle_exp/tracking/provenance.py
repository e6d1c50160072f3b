"""What produced a run, recorded in its run.json (`"provenance"`), so that a report can tell comparable runs
from runs that differ in more than their config.

The same command and seed end at different figures on another CPU, thread count or library version (the
default run: 84.4% on one machine, 85.2% on another, 82.4% at one thread), which is the size of the gaps a
sweep compares. So a run records:

- `commit`, `dirty` (tracked files changed since it: the commit does not say what ran);
- `versions` of Python, torch, lightning, transformers, peft and twinkle_exp (None: not installed);
- `threads`: torch's intra- and inter-op pools and the OMP / MKL variables as set;
- `blas` (torch's build setting), `cpu` (model name and machine), `accelerator` (the device it trained on);
- `warm_start_key` (the cache key, which covers the code that builds the warm-start) and
  `reference_digest` (sha256 of the frozen reference's weights: the warm-started policy);
- `seed_fixes`: what the run's seed fixes, so the report knows which runs of different variants share their
  randomness (paired by seed): the prompt stream and the sampler stream are seeded by `seed`; the warm-start
  by `warmup.seed`, shared by every seed and loss of a sweep.

`run_json.PROVENANCE_KEYS` are the fields that must agree for two runs to be compared (in the run directory's
contract, which the report reads; checked by `report.loading.provenance`).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

_PACKAGES = ("torch", "lightning", "transformers", "peft", "twinkle_exp")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


@functools.cache  # the checkout does not change under a running process; the loggers and run.json both ask
def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout this code runs from; (None, None) outside a git checkout."""
    commit = _git("rev-parse", "HEAD")
    if not commit:
        return None, None
    # Untracked files (run directories, caches) do not change what ran; tracked changes do.
    status = _git("status", "--porcelain", "--untracked-files=no")
    return commit.strip(), None if status is None else bool(status.strip())


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({platform.machine()})"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas() -> str | None:
    import torch

    for part in torch.__config__.show().replace("\n", ",").split(","):
        if part.strip().startswith("BLAS_INFO="):
            return part.split("=", 1)[1].strip()
    return None


def accelerator(device: Any) -> str:
    """The device's name: "cpu", or the GPU's model."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return device.type


def collect(
    *,
    seed: int,
    warmup_seed: int | None,
    device: Any,
    warm_start_key: str | None,
    reference_digest: str | None,
) -> dict[str, Any]:
    """The `"provenance"` object of run.json for a run of `seed` trained on `device`."""
    import torch

    commit, dirty = git_state()
    return {
        "commit": commit,
        "dirty": dirty,
        "versions": versions(),
        "threads": {
            "torch": torch.get_num_threads(),
            "torch_interop": torch.get_num_interop_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS"),
        },
        "blas": blas(),
        "cpu": cpu_model(),
        "accelerator": accelerator(device),
        "warm_start_key": warm_start_key,
        "reference_digest": reference_digest,
        "seed_fixes": {
            "prompt_stream": seed,
            "sampler_stream": seed,
            "warm_start": None if warmup_seed is None else f"warmup.seed={warmup_seed}",
        },
    }
