"""Reading a Trackio project back through Trackio's own API, in a subprocess: trackio fixes its data directory
(TRACKIO_DIR) once, when it is first imported, so the test process itself never imports it."""

from __future__ import annotations

import csv
import json
import math
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

READ_PROJECT = """
import json, sys
import trackio
from trackio.sqlite_storage import SQLiteStorage

project = sys.argv[1]
runs = [
    {"name": run.name, "config": run.config, "logs": SQLiteStorage.get_logs(project, run.name, run_id=run.id)}
    for run in trackio.Api().runs(project)
]
print(json.dumps(runs, default=str))
"""
NOT_METRICS = {"step", "timestamp", "epoch"}
PLOT_ORDER = "train/reward_mean,train/*,val/*,summary/*"


def read_project(trackio_dir: Path, env: dict, project: str = "twinkle_exp") -> dict[str, dict]:
    """{run name: {"config": ..., "logs": [{key: value, "step": n, ...}, ...]}} of `project` in `trackio_dir`."""
    proc = subprocess.run(
        [sys.executable, "-c", READ_PROJECT, project],
        env={**env, "TRACKIO_DIR": str(trackio_dir)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {run["name"]: run for run in json.loads(proc.stdout.splitlines()[-1])}


def csv_values(run_dir: Path) -> dict[tuple[int, str], float]:
    """{(step, key): value} of every cell of the run's metrics.csv."""
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {
        (int(row["step"]), key): float(value)
        for row in rows
        for key, value in row.items()
        if value != "" and key not in NOT_METRICS
    }


def logged_values(logs: list[dict]) -> dict[tuple[int, str], float]:
    """The same from a Trackio run's logs, leaving out its tables and the end-of-run summary."""
    return {
        (int(log["step"]), key): float(value)
        for log in logs
        for key, value in log.items()
        if key not in NOT_METRICS and not key.startswith("summary/") and not isinstance(value, dict)
    }


def same_values(a: dict, b: dict) -> bool:
    """Equal keys, and equal values (NaN equal to NaN: the non-finite checks log them)."""
    return a.keys() == b.keys() and all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_dashboard(trackio_dir: Path, env: dict, log: Path, project: str = "twinkle_exp") -> tuple:
    """`trackio.show` in a subprocess on a free local port, without opening a browser -> (process, url)."""
    port = free_port()
    code = f"import trackio; trackio.show(project={project!r}, open_browser=False, server_port={port}, block_thread=True)"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", code],
            # The reward curve first, as docs/watching.md suggests (else trackio orders groups by name).
            env={**env, "TRACKIO_DIR": str(trackio_dir), "TRACKIO_PLOT_ORDER": PLOT_ORDER},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/?project={project}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the dashboard exited: {log.read_text()[-2000:]}"
        try:
            with urllib.request.urlopen(url, timeout=5):
                return process, url
        except OSError:
            time.sleep(0.5)
    process.terminate()
    raise AssertionError(f"the dashboard did not answer within 120 s: {log.read_text()[-2000:]}")
