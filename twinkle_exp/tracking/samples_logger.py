"""samples.jsonl as one of the run's Lightning loggers, so that the training module finds it among its
loggers (`keep_samples`) the way it finds the dashboards' tables; a test's module without it writes nothing.

A failing write (a full disk) is one warning, and the run goes on without the file (`fail_safe`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only

from twinkle_exp.tracking.fail_safe import FailSafe, guarded
from twinkle_exp.tracking.samples_file import SAMPLES_JSONL, SamplesFile


class SamplesFileLogger(FailSafe, Logger):
    """`<run_dir>/samples.jsonl`: `rows` completions a rollout, `megabytes` in all (samples_file)."""

    tool = SAMPLES_JSONL

    def __init__(self, run_dir: Path, rows: int, megabytes: float) -> None:
        super().__init__()
        self.file = SamplesFile(Path(run_dir) / SAMPLES_JSONL, rows, int(megabytes * 1_000_000))

    @property
    def name(self) -> str:
        return SAMPLES_JSONL

    @property
    def version(self) -> str:
        return ""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        pass  # metrics.csv holds the metrics

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass  # run.json holds the config

    @guarded
    @rank_zero_only
    def write_rollout(self, **rollout: Any) -> None:
        self.file.write_rollout(**rollout)


def keep_samples(loggers: list[Any], **rollout: Any) -> None:
    """A rollout's completions to samples.jsonl, when the run keeps one (`SamplesFile.write_rollout`'s
    arguments)."""
    for logger in loggers:
        if isinstance(logger, SamplesFileLogger):
            logger.write_rollout(**rollout)


def kept_run_dir(loggers: list[Any]) -> Path | None:
    """The run directory samples.jsonl is kept in (items.jsonl goes beside it); None when the run keeps none."""
    for logger in loggers:
        if isinstance(logger, SamplesFileLogger):
            return logger.file.path.parent
    return None
