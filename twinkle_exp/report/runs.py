"""Find the jobs of a sweep and load what each one left on disk: run.json, the overrides, metrics.csv.

The layout is the trainer's contract: a job directory is any directory holding `.hydra/overrides.yaml` or
`run.json`, at any depth under the sweep directory.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from twinkle_exp import metric_names as M
from twinkle_exp.tracking import override_key

RUN_FILE = "run.json"
OVERRIDES_FILE = os.path.join(".hydra", "overrides.yaml")
METRICS_FILE = "metrics.csv"

# The keys the report reads, as the trainer logs them (defined once, in twinkle_exp.metric_names).
VAL_ACCURACY = M.VAL_ACCURACY
REWARD_MEAN = M.REWARD_MEAN
KL = M.KL
CLIP_LOW = M.CLIP_LOW
CLIP_HIGH = M.CLIP_HIGH
CLIP_REGION = M.CLIP_REGION

FINISHED = "finished"
NOT_STARTED = "not started"

Series = list[tuple[int, float]]  # (optimizer step, value), sorted by step, one value per step


@dataclass
class Run:
    """One job of the sweep, as far as its files tell."""

    path: Path
    name: str  # path relative to the sweep directory, "." when the sweep directory is itself the job
    overrides: list[str]
    status: str  # "finished" | "running" | "failed" | "not started" | whatever run.json says
    seed: int | None = None
    wall_time_s: float | None = None
    error: str | None = None
    metrics: dict[str, Series] = field(default_factory=dict)

    @property
    def variant_overrides(self) -> list[str]:
        return [o for o in self.overrides if not is_seed_override(o)]

    @property
    def variant(self) -> str:
        return ", ".join(self.variant_overrides) or "default"

    @property
    def finished(self) -> bool:
        return self.status == FINISHED


def is_seed_override(override: str) -> bool:
    # "+seed=1" and "++seed=1" set the same key as "seed=1"; "loss.seed=1" would be a different key.
    return override_key(override) == "seed"


def find_job_dirs(sweep_dir: Path, skip: Path | None = None) -> list[Path]:
    """Every job directory under `sweep_dir` (itself included), sorted; `skip` (the report's output) is ignored."""
    skip_resolved = skip.resolve() if skip is not None else None
    jobs = []
    for root, dirs, _files in os.walk(sweep_dir):
        here = Path(root)
        if skip_resolved is not None and here.resolve() == skip_resolved:
            dirs[:] = []
            continue
        if (here / RUN_FILE).is_file() or (here / OVERRIDES_FILE).is_file():
            jobs.append(here)
            # A job's own subfolders (wandb, checkpoints, .hydra) hold no further jobs; walking them is slow.
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    return sorted(jobs)


def load_run(job_dir: Path, sweep_dir: Path) -> Run:
    info = _read_run_json(job_dir / RUN_FILE)
    overrides = info.get("overrides")
    if not isinstance(overrides, list):
        overrides = _read_overrides(job_dir / OVERRIDES_FILE)
    overrides = [str(o) for o in overrides]
    return Run(
        path=job_dir,
        name=job_dir.relative_to(sweep_dir).as_posix(),
        overrides=overrides,
        status=str(info.get("status") or NOT_STARTED),
        seed=_seed(info.get("seed"), overrides),
        wall_time_s=_number(info.get("wall_time_s")),
        error=info.get("error") or None,
        metrics=load_metrics(job_dir / METRICS_FILE),
    )


def load_sweep(sweep_dir: Path, skip: Path | None = None) -> list[Run]:
    return [load_run(job, sweep_dir) for job in find_job_dirs(sweep_dir, skip)]


def load_metrics(csv_path: Path) -> dict[str, Series]:
    """Every numeric column of a Lightning CSVLogger file, as one series per metric.

    Rows are sparse (a metric's cell is empty where it was not logged) and a step can appear on several rows;
    several values of one metric at one step (gradient-accumulation micro-steps) are averaged. A failed run's
    file may end mid-row: the cells that parse are kept, the rest are dropped.
    """
    if not csv_path.is_file():
        return {}
    values: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    try:
        with csv_path.open(newline="", encoding="utf-8", errors="replace") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or "step" not in reader.fieldnames:
                return {}
            for row in reader:
                step = _number(row.get("step"))
                if step is None:
                    continue
                for key, cell in row.items():
                    if key is None or key in ("step", "epoch"):
                        continue  # key None: extra cells of a malformed row
                    value = _number(cell)
                    if value is not None:
                        values[key][int(step)].append(value)
    except csv.Error:
        pass  # a corrupt tail (NUL bytes after a crash): keep the rows read so far
    return {
        key: [(step, sum(vs) / len(vs)) for step, vs in sorted(by_step.items())]
        for key, by_step in values.items()
    }


def _read_run_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        # Seen when the trainer is killed while writing it: report the job rather than hide it.
        return {"status": "unknown", "error": f"unreadable {RUN_FILE}: {exc}"}
    return data if isinstance(data, dict) else {"status": "unknown", "error": f"{RUN_FILE} is not an object"}


def _read_overrides(path: Path) -> list:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return []
    return data if isinstance(data, list) else []


def _seed(value, overrides: list[str]) -> int | None:
    if value is None:
        value = next((o.split("=", 1)[1] for o in overrides if is_seed_override(o) and "=" in o), None)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _number(cell) -> float | None:
    """A finite float, or None for an empty, non-numeric or non-finite cell (NaN is treated as not logged)."""
    if cell is None or cell == "":
        return None
    try:
        value = float(cell)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
