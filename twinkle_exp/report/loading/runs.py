"""Find the jobs of one or more sweeps and load what each left on disk: run.json, Hydra's files, metrics.csv,
samples.jsonl.

The layout is the trainer's contract: a job directory is any directory holding `.hydra/overrides.yaml` or
`run.json`, at any depth under a sweep directory (a single run's directory is its own sweep of one job).
Whatever cannot be read is recorded in the run's `problems`, never skipped in silence; so is a `.hydra/` that
disagrees with the identity run.json records (`tracking.hydra_record`): such a run is labelled by run.json.
A run.json written before that record existed has no identity, and its `.hydra/` is read as it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinkle_exp import metric_names as M
from twinkle_exp.tracking.hydra_record import record_differences
from twinkle_exp.tracking.items_file import ITEMS_JSONL, read_items
from twinkle_exp.tracking.metrics_csv import Series, read_metrics
from twinkle_exp.tracking.run_json import IDENTITY, METRICS_CSV, MOVED_ASIDE, RUN_JSON
from twinkle_exp.tracking.samples_file import SAMPLES_JSONL, read_samples

from .run_files import (
    CONFIG_FILE,
    HYDRA_FILE,
    OVERRIDES_FILE,
    ends_early,
    is_seed_override,
    number,
    read_overrides,
    read_run_json,
    read_yaml_dict,
    seed_of,
)

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
    run_json: dict[str, Any] = field(default_factory=dict)  # as written ({} when absent or unreadable)
    samples: list[dict[str, Any]] = field(default_factory=list)  # samples.jsonl's rows ([] when absent)
    items: list[dict[str, Any]] = field(default_factory=list)  # items.jsonl's rows, one per validation step

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


def find_job_dirs(sweep_dir: Path, skip: Path | None = None) -> list[Path]:
    """Every job directory under `sweep_dir` (itself included), sorted; `skip` (the report's output) is ignored."""
    skip_resolved = skip.resolve() if skip is not None else None
    jobs = []
    for root, dirs, _files in os.walk(sweep_dir):
        here = Path(root)
        if skip_resolved is not None and here.resolve() == skip_resolved:
            dirs[:] = []
            continue
        if (here / RUN_JSON).is_file() or (here / OVERRIDES_FILE).is_file():
            jobs.append(here)
            # A job's own subfolders (wandb, checkpoints, .hydra) hold no further jobs; walking them is slow.
            dirs[:] = []
            continue
        # Hidden folders, and runs moved aside by `previous_run=move_aside` (an older attempt, not a job).
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and MOVED_ASIDE not in d)
    return sorted(jobs)


def load_run(job_dir: Path, sweep_dir: Path) -> Run:
    """Everything `job_dir` holds; `sweep_dir` only names it (the run's name is the path relative to it)."""
    written, info = read_run_json(job_dir / RUN_JSON)
    overrides = info.get("overrides")
    if not isinstance(overrides, list):
        overrides = read_overrides(job_dir / OVERRIDES_FILE)
    overrides = [str(o) for o in overrides]
    status = str(info.get("status") or NOT_STARTED)
    metrics = read_metrics(job_dir / METRICS_CSV)
    problems = [f"{RUN_JSON}: {info['error']}"] if info.get("status") == "unknown" else []
    problems += metrics.problems
    cut = ends_early(info, metrics.series) if status == FINISHED else None
    if cut is not None:
        problems.append(cut)
        metrics.series, metrics.nonfinite = {}, {}
    elif status == FINISHED and not (job_dir / METRICS_CSV).is_file():
        problems.append(f"finished, but {METRICS_CSV} is missing: no statistics for this run")
    elif status == FINISHED and M.VAL_ACCURACY not in metrics.series:
        problems.append(f"finished, but logged no {M.VAL_ACCURACY}: left out of the accuracy statistics")
    samples, samples_problems = read_samples(job_dir / SAMPLES_JSONL)
    problems += samples_problems
    items, items_problems = read_items(job_dir / ITEMS_JSONL)
    problems += items_problems
    config, config_problem = read_yaml_dict(job_dir / CONFIG_FILE)
    hydra, _ = read_yaml_dict(job_dir / HYDRA_FILE)
    choices = ((hydra.get("hydra") or {}).get("runtime") or {}).get("choices") or {}
    identity = written.get(IDENTITY)
    disagree = record_differences(job_dir, identity) if isinstance(identity, dict) else []
    if disagree:
        # `.hydra/` describes another experiment than run.json's: run.json's labels, no config values.
        problems.append(
            f"{RUN_JSON} and .hydra/ disagree ({'; '.join(disagree)}): labelled by {RUN_JSON}, "
            f".hydra/ not used"
        )
        config, config_problem = {}, None
        choices = identity.get("choices") if isinstance(identity.get("choices"), dict) else {}
    return Run(
        path=job_dir,
        name=job_dir.relative_to(sweep_dir).as_posix(),
        overrides=overrides,
        status=status,
        seed=seed_of(info.get("seed"), overrides),
        wall_time_s=number(info.get("wall_time_s")),
        error=info.get("error") or None,
        metrics=metrics.series,
        nonfinite=metrics.nonfinite,
        config=config,
        choices={str(k): str(v) for k, v in choices.items() if v is not None},
        problems=problems + ([config_problem] if config_problem else []),
        run_json=written,
        samples=samples,
        items=items,
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
