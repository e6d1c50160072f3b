"""wandb failing to start or to write never ends a run: one warning, and metrics.csv stays complete."""

from __future__ import annotations

import csv
import logging

import pytest
from omegaconf import OmegaConf

from twinkle_exp.config.schema import LoggerConfig
from twinkle_exp.tracking.loggers import build_loggers, log_metrics, log_samples
from twinkle_exp.tracking.metrics_file import MetricsCSVLogger
from twinkle_exp.tracking.run_json import JobInfo
from twinkle_exp.tracking.safe_wandb import SafeWandbLogger


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    for key, sub in (
        ("WANDB_CONFIG_DIR", "config"),
        ("WANDB_CACHE_DIR", "cache"),
        ("WANDB_DATA_DIR", "data"),
    ):
        monkeypatch.setenv(key, str(tmp_path / "wandb_home" / sub))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    import wandb

    wandb.finish()


def _loggers(tmp_path):
    cfg = OmegaConf.create({"seed": 0})
    return build_loggers(
        cfg, LoggerConfig(mode="offline"), None, JobInfo(output_dir=tmp_path), wandb_id="abc123"
    )


def _csv_steps(tmp_path) -> list[int]:
    with open(tmp_path / "metrics.csv", newline="") as f:
        return [int(row["step"]) for row in csv.DictReader(f)]


def test_wandb_that_cannot_start_leaves_the_csv_alone(tmp_path, offline_wandb, monkeypatch, caplog):
    import wandb

    def broken_init(**kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(wandb, "init", broken_init)
    with caplog.at_level(logging.WARNING):
        loggers = _loggers(tmp_path)
    assert [type(lg) for lg in loggers] == [MetricsCSVLogger]
    assert "wandb failed (start: OSError: No space left on device); the run continues" in caplog.text
    log_metrics(loggers, {"train/loss": 1.0}, step=1)
    assert _csv_steps(tmp_path) == [1]


@pytest.mark.slow
def test_wandb_that_fails_mid_run_is_dropped_after_one_warning(tmp_path, offline_wandb, caplog):
    loggers = _loggers(tmp_path)
    csv_logger, wandb_logger = loggers
    assert isinstance(wandb_logger, SafeWandbLogger) and wandb_logger.experiment.id == "abc123"
    log_metrics(loggers, {"train/loss": 1.0}, step=1)

    def broken_log(*args, **kwargs):
        raise BrokenPipeError("wandb service went away")

    wandb_logger.experiment.log = broken_log
    with caplog.at_level(logging.WARNING):
        for step in (2, 3):
            log_metrics(loggers, {"train/loss": float(step)}, step=step)
        log_samples(loggers, ["prompt"], [["a"]], step=3)
        wandb_logger.finalize("success")
    assert caplog.text.count("wandb failed") == 1
    assert "log_metrics: BrokenPipeError: wandb service went away" in caplog.text
    assert _csv_steps(tmp_path) == [1, 2, 3]
