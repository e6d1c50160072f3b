"""What every benchmark here shares: one subprocess per measurement, peak memory, and the machine's load.

A measurement runs in a fresh process so that its peak resident memory is its own: the parent runs
`python -m <module> --child <json>`, the child prints one JSON line. On a shared machine timings mean little
unless one knows what else ran: each measurement records the load average before and after it and the
CPU time that *other* processes used meanwhile (from /proc/stat, less the child's own CPU time), and is
marked busy when the others used more than `BUSY_CORES` cores on average.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# Average number of cores used by other processes above which a measurement is marked busy.
BUSY_CORES = 0.25
# The repository's root: children run `python -m benchmarks.<name>` from there, whatever the caller's directory.
REPO_ROOT = Path(__file__).resolve().parents[1]


def load_average() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def _busy_cpu_seconds() -> float | None:
    """CPU seconds every process on the machine spent so far (None where /proc/stat is missing)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Measurement:
    result: dict  # what the child printed
    wall_s: float  # the child process's whole life, start-up included
    others_cores: float | None  # average cores used by other processes meanwhile
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]

    @property
    def busy(self) -> bool:
        return self.others_cores is not None and self.others_cores > BUSY_CORES


def measure_in_child(module: str, spec: dict, env: dict | None = None) -> Measurement:
    """Run `python -m module --child '<spec as json>'` and parse the JSON line it prints last."""
    load_before = os.getloadavg()
    busy0, mine0, t0 = _busy_cpu_seconds(), _children_cpu_seconds(), time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", module, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=None if env is None else {**os.environ, **env},
        cwd=REPO_ROOT,
    )
    wall = time.perf_counter() - t0
    busy1, mine1 = _busy_cpu_seconds(), _children_cpu_seconds()
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child {spec} failed:\n{proc.stderr[-3000:]}")
    others = None if busy0 is None else max(0.0, (busy1 - busy0) - (mine1 - mine0)) / wall
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return Measurement(result, wall, others, load_before, os.getloadavg())


def median(values: list[float]) -> float:
    return statistics.median(values)


# --- in the child -----------------------------------------------------------------------------------------


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024  # kB
    raise KeyError(key)


class PeakMemory:
    """Extra peak memory of a block over what the process held when it started: resident set size on CPU
    (the high-water mark is reset first through /proc/self/clear_refs, so setup peaks do not count), the
    caching allocator's peak on CUDA."""

    def __init__(self, device: str):
        self.device = device

    def __enter__(self) -> PeakMemory:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated() / 2**20
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current VmRSS (Linux >= 4.0)
            self.base = _status_mib("VmRSS:")
        return self

    def __exit__(self, *exc) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()
            self.extra_mib = torch.cuda.max_memory_allocated() / 2**20 - self.base
        else:
            self.extra_mib = _status_mib("VmHWM:") - self.base


def print_child_result(result: dict) -> None:
    print(json.dumps(result), flush=True)
