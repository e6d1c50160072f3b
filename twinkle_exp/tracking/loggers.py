"""The run's loggers: metrics.csv always, wandb (offline by default) unless disabled, Trackio when asked, and
how to write to them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from twinkle_exp import metric_names as M
from twinkle_exp.config.schema import LoggerConfig
from twinkle_exp.tracking.provenance import git_state, versions
from twinkle_exp.tracking.run_json import JobInfo


def build_loggers(
    cfg: DictConfig, logger: LoggerConfig, sweep_name: str | None, job: JobInfo, wandb_id: str | None = None
) -> list[Any]:
    """CSV always; wandb when `logger.wandb` and Trackio when `logger.trackio`, each with the resolved `cfg`
    (and the git commit, whether the checkout was dirty, and the library versions) as its config, the sweep as its group and the job's overrides as its name.

    `wandb_id`: the run to write to (a resumed run continues its own; Trackio's run is named after it too).
    A dashboard failing to start is a warning, and the run goes on without it; a missing trackio package
    refuses the run (UserError).
    """
    from twinkle_exp.tracking.metrics_file import MetricsCSVLogger

    loggers: list[Any] = [MetricsCSVLogger(job.output_dir)]
    if not (logger.wandb or logger.trackio):
        return loggers
    group = sweep_name or (Path(job.sweep_dir).name if job.multirun and job.sweep_dir else None)
    tags = [f"{k}:{v}" for k, v in sorted(job.choices.items())] + list(logger.tags)
    config = OmegaConf.to_container(cfg, resolve=True)
    # What produced the run, on the dashboard too (run.json's "provenance" holds the rest: threads, machine).
    config["git_commit"], config["git_dirty"] = git_state()
    config["versions"] = versions()
    config["overrides"] = job.overrides
    dashboards = []  # neither starts anything until start(): a missing trackio refuses the run before wandb
    if logger.wandb:
        dashboards.append(_wandb_logger(logger, job, group, tags, config, wandb_id))
    if logger.trackio:
        dashboards.append(_trackio_logger(logger, job, group, tags, config, wandb_id))
    return loggers + [d for d in dashboards if d.start()]


def _wandb_logger(
    logger: LoggerConfig, job: JobInfo, group: str | None, tags: list[str], config: dict, wandb_id: str | None
) -> Any:
    import wandb

    from twinkle_exp.tracking.safe_wandb import SafeWandbLogger

    wandb_logger = SafeWandbLogger(
        id=wandb_id,
        resume="allow",  # the same id continues the run, offline too (wandb sync merges the attempts)
        project=logger.project,
        entity=logger.entity,
        name=job.name,
        group=group,
        tags=tags,
        job_type=logger.job_type,
        save_dir=str(job.output_dir),
        mode=logger.mode,
        config=config,
        reinit="finish_previous",
        # Quiet: the ~30 lines of history sparklines at the end would push the run's summary off the screen;
        # the summary names the run's directory and how to sync it instead.
        settings=wandb.Settings(quiet=True),
    )
    # Lightning passes anonymous=None, which wandb warns about on every run ("has no effect").
    wandb_logger._wandb_init.pop("anonymous", None)
    return wandb_logger


def _trackio_logger(
    logger: LoggerConfig, job: JobInfo, group: str | None, tags: list[str], config: dict, run_id: str | None
) -> Any:
    from twinkle_exp.tracking.trackio_logger import TrackioLogger, require_trackio

    require_trackio()
    # Trackio has no tags or job type of its own: they go into the config, where its dashboard shows them.
    config = {**config, "tags": tags, "job_type": logger.job_type}
    return TrackioLogger(logger.project, job.name, run_id, group, config)


def log_metrics(loggers: list[Any], metrics: dict[str, float], step: int) -> None:
    """Straight to the loggers at optimizer step `step` (Lightning's self.log would step by batches)."""
    from lightning.pytorch.loggers import CSVLogger

    for logger in loggers:
        logger.log_metrics(metrics, step=step)
        if isinstance(logger, CSVLogger):
            logger.save()  # so a running job's metrics.csv is readable (the report, tail -f)


def log_samples(loggers: list[Any], columns: list[str], rows: list[list[Any]], step: int) -> None:
    """A table of sample completions, for the loggers that show tables (wandb, Trackio)."""
    from lightning.pytorch.loggers import WandbLogger

    from twinkle_exp.tracking.trackio_logger import TrackioLogger

    for logger in loggers:
        if isinstance(logger, (WandbLogger, TrackioLogger)):
            logger.log_table(key=M.SAMPLES_TABLE, columns=columns, data=rows, step=step)
