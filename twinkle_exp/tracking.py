"""Run bookkeeping: loggers (CSV always, wandb offline by default), run.json status, the sweep's naming."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from twinkle_exp import metric_names as M
from twinkle_exp.config import LoggerConfig


@dataclass
class JobInfo:
    """Who this job is within its sweep, read from Hydra's runtime config when there is one."""

    output_dir: Path
    overrides: list[str] = field(default_factory=list)
    choices: dict[str, str] = field(default_factory=dict)
    sweep_dir: str | None = None
    multirun: bool = False

    @property
    def name(self) -> str:
        return ",".join(self.overrides) or "default"

    @classmethod
    def from_hydra(cls, fallback_dir: str | os.PathLike = ".") -> JobInfo:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if not HydraConfig.initialized():
            return cls(output_dir=Path(fallback_dir))
        hc = HydraConfig.get()
        # The overrides that name the job: those Hydra also uses for its directory name (a sweep file's
        # `+sweep=...` is excluded there, so it does not end up in every run name and report row).
        excluded = set(hc.job.config.override_dirname.exclude_keys)
        overrides = [o for o in hc.overrides.task if override_key(o) not in excluded]
        choices = {
            k: v
            for k, v in hc.runtime.choices.items()
            if v is not None and not k.startswith(("hydra", "schema/"))
        }
        return cls(
            output_dir=Path(hc.runtime.output_dir),
            overrides=overrides,
            choices=choices,
            sweep_dir=hc.sweep.dir,
            multirun=hc.mode == RunMode.MULTIRUN,
        )


def override_key(override: str) -> str:
    """The config key an override sets: "+loss.tau=0.5" -> "loss.tau" (+, ++ and ~ set the same key)."""
    return override.split("=", 1)[0].lstrip("+~").strip()


def git_commit() -> str | None:
    """The commit of the twinkle_exp checkout this code runs from, or None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def build_loggers(cfg: DictConfig, logger: LoggerConfig, sweep_name: str | None, job: JobInfo) -> list[Any]:
    """CSV always; wandb when `logger.wandb`, with the resolved `cfg` (and the git commit) as its config."""
    from lightning.pytorch.loggers import CSVLogger, WandbLogger

    loggers: list[Any] = [CSVLogger(save_dir=str(job.output_dir), name="", version="")]
    if not logger.wandb:
        return loggers
    group = sweep_name or (Path(job.sweep_dir).name if job.multirun and job.sweep_dir else None)
    tags = [f"{k}:{v}" for k, v in sorted(job.choices.items())] + list(logger.tags)
    config = OmegaConf.to_container(cfg, resolve=True)
    config["git_commit"] = git_commit()
    config["overrides"] = job.overrides
    import wandb

    wandb_logger = WandbLogger(
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


class RunStatus:
    """`<output_dir>/run.json`: running / finished / failed, which the report reads.

    `write=False` (every rank but global rank 0) keeps the bookkeeping and writes nothing.
    """

    def __init__(self, job: JobInfo, seed: int, write: bool = True) -> None:
        self.path = job.output_dir / "run.json"
        self.write = write
        self.started = time.time()
        self.data: dict[str, Any] = {
            "status": "running",
            "overrides": job.overrides,
            "loss": job.choices.get("loss"),
            "seed": seed,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started)),
            "wall_time_s": None,
            "error": None,
        }
        self._write()

    def _write(self) -> None:
        if not self.write:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2))
        os.replace(tmp, self.path)

    def finish(self, status: str, error: str | None = None, **extra: Any) -> None:
        self.data.update(
            status=status, error=error, wall_time_s=round(time.time() - self.started, 2), **extra
        )
        self._write()
