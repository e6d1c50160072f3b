"""The end-of-run summary of one run, in one place: its figures for dashboards, the traps the diagnostics
find in it, and the table printed on the terminal.

run.py calls `summarize_run` once training is over: it reads back the run's own metrics.csv (so it sees
exactly what the report will see, whatever the logging layout), computes the figures once, puts them into
the wandb run summary and returns them for run.json; then `print_run_summary` prints them once: the table
(accuracy before and after, where everything was written) and a warning per diagnosis. The figures and the
diagnostics are pure functions (`run_figures`, `diagnostics.per_run.diagnose_run`), tested without a run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from twinkle_exp import metric_names as M
from twinkle_exp.tracking.metrics_csv import Series, read_metrics
from twinkle_exp.tracking.samples_file import SAMPLES_JSONL, read_samples

from .diagnostics.per_run import DIAGNOSTICS, diagnose_run
from .series import DEFAULT_THRESHOLD, accuracy_auc, first_step_reaching

WARNINGS = "warnings"  # run.json only: the diagnostics that fired, with evidence and advice


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
    """Figures and diagnoses of the finished run whose metrics are in `metrics_csv`; written into every wandb
    logger's run summary; returned as a JSON-ready dict (the figures, plus WARNINGS: a list of
    {"check", "title", "evidence", "advice"}, "check" naming the diagnostic, with "quotes" of completions
    from the run's samples.jsonl for the checks about completions) for run.json. `cfg`: the run's
    config (DictConfig, dataclass or mapping)."""
    metrics = read_metrics(metrics_csv)
    figures = run_figures(metrics.series, wall_time_s)
    samples, _ = read_samples(Path(metrics_csv).parent / SAMPLES_JSONL)  # quoted by the completion checks
    diagnoses = diagnose_run(metrics.series, metrics.nonfinite, plain_config(cfg), samples)
    figures[M.SUMMARY_WARNINGS] = [d.diagnostic for d in diagnoses]
    _to_wandb(figures, loggers)
    warnings = [
        {
            "title": DIAGNOSTICS[d.diagnostic][0],
            "check": d.diagnostic,
            "evidence": d.evidence,
            "advice": d.advice,
            **({"quotes": list(d.quotes)} if d.quotes else {}),
        }
        for d in diagnoses
    ]
    warnings += [
        {"check": "data", "title": "metrics.csv", "evidence": p, "advice": ""} for p in metrics.problems
    ]
    return {**figures, WARNINGS: warnings}


def print_run_summary(
    result: dict[str, Any],
    loss_fn: Any,
    loggers: list[Any],
    smoke_run: bool = False,
    console: Console | None = None,
) -> None:
    """The run's table, then its warnings: `result` is what run.py returns, with `summarize_run`'s figures
    under "summary"; `loggers` the ones that did not fail (a wandb run is named with how to upload it)."""
    console = console or Console()
    console.print(_table(result, loss_fn, loggers, smoke_run))
    print_warnings(result["summary"], console)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _table(result: dict[str, Any], loss_fn: Any, loggers: list[Any], smoke_run: bool) -> Table:
    """A two-column table that fits 80 columns: long values (paths, the loss) wrap, whole, onto more lines."""
    table = Table(title="twinkle_exp run", show_header=False, title_justify="left")
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    before, after = result["accuracy_before"], result["accuracy_after"]
    table.add_row("loss", repr(loss_fn))
    table.add_row("greedy val accuracy", f"{before:.1%} (warm-start) -> {after:.1%} ({after - before:+.1%})")
    before_by, after_by = result.get("accuracy_by_length_before"), result.get("accuracy_by_length_after")
    if before_by and after_by:
        table.add_row(
            "by answer length",
            ", ".join(f"{n}: {before_by[n]:.0%} -> {after_by[n]:.0%}" for n in after_by),
        )
    steps = _plural(result["steps"], "optimizer step")
    table.add_row("steps", f"{steps} from {_plural(result['rollouts'], 'rollout')}")
    if smoke_run:
        table.add_row("note", "a smoke run (debug=...): too short for the accuracy to move")
    table.add_row("wall time", f"{result['wall_time_s']:.0f} s")
    table.add_row("output dir", result["output_dir"])
    table.add_row("metrics (CSV)", result["metrics_csv"])
    for run_dir in _wandb_dirs(loggers):
        table.add_row("wandb run", str(run_dir))
        table.add_row("upload later", f"wandb sync {run_dir}")
    if result["checkpoint"]:
        table.add_row("checkpoint", result["checkpoint"])
    return table


def print_warnings(summary: dict[str, Any], console: Console | None = None) -> None:
    """One yellow paragraph per diagnosis of the run (nothing when there is none)."""
    console = console or Console()
    for w in summary.get(WARNINGS, []):
        change = f" → {w['advice']}." if w["advice"] else ""
        console.print(f"⚠ {w['title']}: {w['evidence']}.{change}", style="yellow", highlight=False)
        for quote in w.get("quotes", []):  # the run's own completions (samples.jsonl)
            console.print(f"  {quote}", style="yellow", highlight=False, markup=False)


def plain_config(cfg: Any) -> dict:
    """The run's config as nested dicts, from an OmegaConf config, a dataclass or a mapping ({} otherwise)."""
    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    return dict(cfg) if isinstance(cfg, Mapping) else {}


def _wandb_dirs(loggers: list[Any]) -> list[Path]:
    """The run directory of every WandbLogger in `loggers` (wandb's files/ sits inside it)."""
    if not loggers:
        return []  # no reason to import Lightning
    from lightning.pytorch.loggers import WandbLogger

    return [Path(lg.experiment.dir).parent for lg in loggers if isinstance(lg, WandbLogger)]


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
