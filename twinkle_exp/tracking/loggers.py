"""The run's loggers: metrics.csv always, wandb (offline by default) unless disabled, and how to write to them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from twinkle_exp import metric_names as M
from twinkle_exp.config.schema import LoggerConfig
from twinkle_exp.tracking.run_json import JobInfo, git_commit


def build_loggers(
    cfg: DictConfig, logger: LoggerConfig, sweep_name: str | None, job: JobInfo, wandb_id: str | None = None
) -> list[Any]:
    """CSV always; wandb when `logger.wandb`, with the resolved `cfg` (and the git commit) as its config.

    `wandb_id`: the wandb run to write to (a resumed run continues its own); wandb failing to start is a
    warning, and the run goes on with the CSV alone.
    """
    from twinkle_exp.tracking.metrics_file import MetricsCSVLogger
    from twinkle_exp.tracking.safe_wandb import SafeWandbLogger

    loggers: list[Any] = [MetricsCSVLogger(job.output_dir)]
    if not logger.wandb:
        return loggers
    group = sweep_name or (Path(job.sweep_dir).name if job.multirun and job.sweep_dir else None)
    tags = [f"{k}:{v}" for k, v in sorted(job.choices.items())] + list(logger.tags)
    config = OmegaConf.to_container(cfg, resolve=True)
    config["git_commit"] = git_commit()
    config["overrides"] = job.overrides
    import wandb

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
    if wandb_logger.start():
        loggers.append(wandb_logger)
    return loggers


def log_metrics(loggers: list[Any], metrics: dict[str, float], step: int) -> None:
    """Straight to the loggers at optimizer step `step` (Lightning's self.log would step by batches)."""
    from lightning.pytorch.loggers import CSVLogger

    for logger in loggers:
        logger.log_metrics(metrics, step=step)
        if isinstance(logger, CSVLogger):
            logger.save()  # so a running job's metrics.csv is readable (the report, tail -f)


def log_samples(loggers: list[Any], columns: list[str], rows: list[list[Any]], step: int) -> None:
    """A table of sample completions, for the loggers that show tables (wandb)."""
    from lightning.pytorch.loggers import WandbLogger

    for logger in loggers:
        if isinstance(logger, WandbLogger):
            logger.log_table(key=M.SAMPLES_TABLE, columns=columns, data=rows, step=step)
