"""End of one run: its summary figures for dashboards, and warnings for the traps `checks` finds in it.

`summarize_run` is what run.py calls once training is over: it reads back the run's own metrics.csv (so it sees
exactly what the report will see, whatever the logging layout), computes the figures, puts them into the wandb
run summary, and returns them for run.json; `print_warnings` prints the checks that fired. The figures and the
checks themselves are pure functions (`run_figures`, `checks.run_checks`), tested without a run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from rich.console import Console

from twinkle_exp import metric_names as M

from .aggregate import accuracy_auc, first_step_reaching
from .checks import CHECKS, run_checks
from .metrics_csv import Series, read_metrics

DEFAULT_THRESHOLD = 0.5  # the report's default --threshold, so the dashboard and the report agree
WARNINGS = "warnings"  # run.json only: the checks that fired, with evidence and advice


def run_figures(
    metrics: dict[str, Series], wall_time_s: float | None, threshold: float = DEFAULT_THRESHOLD
) -> dict[str, float | int | None]:
    """Final accuracy, area under the accuracy curve, steps to `threshold` and wall time of one run.

    metrics: the run's series by key (read_metrics(...).series). Values are None where the run logged no
    validation accuracy, and steps-to-threshold is None when it never reached it.
    """
    accuracy = metrics.get(M.VAL_ACCURACY, [])
    return {
        M.SUMMARY_FINAL_ACCURACY: accuracy[-1][1] if accuracy else None,
        M.SUMMARY_ACCURACY_AUC: accuracy_auc(accuracy) if accuracy else None,
        M.SUMMARY_STEPS_TO_THRESHOLD: first_step_reaching(accuracy, threshold) if accuracy else None,
        M.SUMMARY_THRESHOLD: threshold,
        M.SUMMARY_WALL_TIME: None if wall_time_s is None else round(wall_time_s, 1),
    }


def summarize_run(
    metrics_csv: Path, cfg: Any, wall_time_s: float | None, loggers: list[Any]
) -> dict[str, Any]:
    """Figures and checks of the finished run whose metrics are in `metrics_csv`; written into every wandb
    logger's run summary; returned as a JSON-ready dict (the figures, plus WARNINGS: a list of
    {"check", "title", "evidence", "advice"}) for run.json. `cfg`: the run's config (DictConfig, dataclass or
    mapping)."""
    metrics = read_metrics(metrics_csv)
    figures = run_figures(metrics.series, wall_time_s)
    findings = run_checks(metrics.series, metrics.nonfinite, plain_config(cfg))
    figures[M.SUMMARY_WARNINGS] = [f.check for f in findings]
    _to_wandb(figures, loggers)
    warnings = [{"title": CHECKS[f.check][0], **dataclasses.asdict(f)} for f in findings]
    warnings += [
        {"check": "data", "title": "metrics.csv", "evidence": p, "advice": ""} for p in metrics.problems
    ]
    return {**figures, WARNINGS: warnings}


def print_warnings(summary: dict[str, Any], console: Console | None = None) -> None:
    """One yellow paragraph per check that fired in the run (nothing when none did)."""
    console = console or Console()
    for w in summary.get(WARNINGS, []):
        change = f" → {w['advice']}." if w["advice"] else ""
        console.print(f"⚠ {w['title']}: {w['evidence']}.{change}", style="yellow", highlight=False)


def plain_config(cfg: Any) -> dict:
    """The run's config as nested dicts, from an OmegaConf config, a dataclass or a mapping ({} otherwise)."""
    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    return dict(cfg) if isinstance(cfg, Mapping) else {}


def _to_wandb(figures: dict[str, Any], loggers: list[Any]) -> None:
    """Put `figures` into the run summary of every WandbLogger in `loggers`, and log them to every logger
    with a `log_summary` (global rank 0 only)."""
    if not loggers:
        return  # nothing to write to, and no reason to import Lightning
    from lightning.pytorch.loggers import WandbLogger
    from lightning.pytorch.utilities import rank_zero_only

    if getattr(rank_zero_only, "rank", 0) != 0:
        return  # other ranks hold a dummy experiment without a summary
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            logger.experiment.summary.update(figures)
        elif hasattr(logger, "log_summary"):  # Trackio's (tracking.trackio_logger), which has no run summary
            logger.log_summary(figures)
