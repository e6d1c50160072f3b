"""Find the jobs of one or more sweeps and load what each left on disk: run.json, Hydra's files, metrics.csv.

The layout is the trainer's contract: a job directory is any directory holding `.hydra/overrides.yaml` or
`run.json`, at any depth under a sweep directory (a single run's directory is its own sweep of one job).
Whatever cannot be read is recorded in the run's `problems`, never skipped in silence.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from twinkle_exp import metric_names as M
from twinkle_exp.tracking.run_json import override_key

from .metrics_csv import Series, read_metrics

RUN_FILE = "run.json"
OVERRIDES_FILE = os.path.join(".hydra", "overrides.yaml")
CONFIG_FILE = os.path.join(".hydra", "config.yaml")  # the job's resolved config
HYDRA_FILE = os.path.join(".hydra", "hydra.yaml")  # Hydra's own config: which option of each group was chosen
METRICS_FILE = "metrics.csv"

# The keys the report reads, as the trainer logs them (defined once, in twinkle_exp.metric_names).
VAL_ACCURACY = M.VAL_ACCURACY
REWARD_MEAN = M.REWARD_MEAN
KL = M.KL
ENTROPY = M.ENTROPY
CLIP_LOW = M.CLIP_LOW
CLIP_HIGH = M.CLIP_HIGH
CLIP_REGION = M.CLIP_REGION

FINISHED = "finished"
NOT_STARTED = "not started"

__all__ = ["Run", "Series", "find_job_dirs", "load_run", "load_runs"]


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
    nonfinite: dict[str, list[int]] = field(default_factory=dict)  # metric -> steps it was logged NaN/inf
    config: dict = field(default_factory=dict)  # .hydra/config.yaml, {} when absent
    choices: dict[str, str] = field(default_factory=dict)  # config group -> chosen option (hydra.yaml)
    problems: list[str] = field(default_factory=list)  # what could not be read, one sentence each
    group: list[str] | None = None  # "key=value" parts chosen by --group-by; None: overrides less seed

    @property
    def variant_overrides(self) -> list[str]:
        """The "key=value" parts that name the run's variant."""
        if self.group is not None:
            return self.group
        return [o for o in self.overrides if not is_seed_override(o)]

    @property
    def variant(self) -> str:
        """The variant label: its parts joined, "default" for none."""
        return ", ".join(self.variant_overrides) or "default"

    @property
    def finished(self) -> bool:
        """Whether run.json says the run finished."""
        return self.status == FINISHED


def is_seed_override(override: str) -> bool:
    # "+seed=1" and "++seed=1" set the same key as "seed=1"; "loss.seed=1" would be a different key.
    """Whether the override sets the top-level `seed` (with or without +/++)."""
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
    """Everything `job_dir` holds; `sweep_dir` only names it (the run's name is the path relative to it)."""
    info = _read_run_json(job_dir / RUN_FILE)
    overrides = info.get("overrides")
    if not isinstance(overrides, list):
        overrides = _read_overrides(job_dir / OVERRIDES_FILE)
    overrides = [str(o) for o in overrides]
    status = str(info.get("status") or NOT_STARTED)
    metrics = read_metrics(job_dir / METRICS_FILE)
    problems = [f"{RUN_FILE}: {info['error']}"] if info.get("status") == "unknown" else []
    problems += metrics.problems
    cut = _ends_early(info, metrics.series) if status == FINISHED else None
    if cut is not None:
        problems.append(cut)
        metrics.series, metrics.nonfinite = {}, {}
    elif status == FINISHED and not (job_dir / METRICS_FILE).is_file():
        problems.append(f"finished, but {METRICS_FILE} is missing: no statistics for this run")
    elif status == FINISHED and VAL_ACCURACY not in metrics.series:
        problems.append(f"finished, but logged no {VAL_ACCURACY}: left out of the accuracy statistics")
    config, config_problem = _read_yaml_dict(job_dir / CONFIG_FILE)
    hydra, _ = _read_yaml_dict(job_dir / HYDRA_FILE)
    choices = ((hydra.get("hydra") or {}).get("runtime") or {}).get("choices") or {}
    return Run(
        path=job_dir,
        name=job_dir.relative_to(sweep_dir).as_posix(),
        overrides=overrides,
        status=status,
        seed=_seed(info.get("seed"), overrides),
        wall_time_s=_number(info.get("wall_time_s")),
        error=info.get("error") or None,
        metrics=metrics.series,
        nonfinite=metrics.nonfinite,
        config=config,
        choices={str(k): str(v) for k, v in choices.items() if v is not None},
        problems=problems + ([config_problem] if config_problem else []),
    )


def load_runs(dirs: list[Path], skip: Path | None = None) -> list[Run]:
    """The jobs under every directory of `dirs` (sweeps or single runs), each job once, in path order.

    With one directory, names are relative to it; with several, relative to their common parent, so that
    `multirun/a/3_loss=sapo` and `multirun/b/3_loss=sapo` stay apart.
    """
    resolved = [d.resolve() for d in dirs]
    base = resolved[0] if len(resolved) == 1 else Path(os.path.commonpath(resolved))
    jobs = sorted({job.resolve() for d in resolved for job in find_job_dirs(d, skip)})
    return [load_run(job, base) for job in jobs]


def _ends_early(info: dict, series: dict[str, Series]) -> str | None:
    """Why a finished run's metrics are left out, when its metrics.csv stops before run.json's last step.

    A cut file's curve would pass for the whole run (its last accuracy for the final one), so the run's
    metrics are not used at all; run.json's own final figure is named so the reader can see the gap.
    """
    final = info.get("final") if isinstance(info.get("final"), dict) else {}
    steps = _number(final.get("steps"))
    if steps is None or not series.get(VAL_ACCURACY) or series[VAL_ACCURACY][-1][0] >= steps:
        return None
    last = max(points[-1][0] for points in series.values() if points)
    accuracy = _number(final.get("accuracy_after"))
    said = f", final {VAL_ACCURACY} {accuracy:.1%}" if accuracy is not None else ""
    return (
        f"finished at step {int(steps)} (run.json{said}), but {METRICS_FILE} has no {VAL_ACCURACY} at that "
        f"step (its rows end at step {last}: cut short or replaced): left out of the statistics and plots"
    )


def _read_run_json(path: Path) -> dict:
    """run.json as a dict; {} when absent; status "unknown" with the reason when unreadable."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        # Seen when the trainer is killed while writing it: report the job rather than hide it.
        return {"status": "unknown", "error": f"unreadable {RUN_FILE}: {exc}"}
    return data if isinstance(data, dict) else {"status": "unknown", "error": f"{RUN_FILE} is not an object"}


def _read_yaml_dict(path: Path) -> tuple[dict, str | None]:
    """(mapping, None), or ({}, why) when the file exists but is not a readable YAML mapping; ({}, None) if absent."""
    if not path.is_file():
        return {}, None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return {}, f"{path.name} unreadable ({type(exc).__name__}): its config values are unknown"
    if not isinstance(data, dict):
        return {}, f"{path.name} is not a mapping: its config values are unknown"
    return data, None


def _read_overrides(path: Path) -> list:
    """The list in .hydra/overrides.yaml, [] when absent or unreadable."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return []
    return data if isinstance(data, list) else []


def _seed(value, overrides: list[str]) -> int | None:
    """The run's seed from run.json, else from its overrides; None when neither says."""
    if value is None:
        value = next((o.split("=", 1)[1] for o in overrides if is_seed_override(o) and "=" in o), None)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _number(cell) -> float | None:
    """A finite float from run.json, or None for a missing, non-numeric or non-finite value."""
    if cell is None or cell == "":
        return None
    try:
        value = float(cell)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
