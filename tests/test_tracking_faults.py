"""wandb or Trackio failing to start or to write never ends a run: one warning, and metrics.csv stays complete;
a missing trackio package refuses the run in one line."""

from __future__ import annotations

import contextvars
import csv
import logging
import subprocess
import sys
import types

import pytest
from omegaconf import OmegaConf

from twinkle_exp.config.schema import LoggerConfig
from twinkle_exp.errors import UserError
from twinkle_exp.tracking.loggers import build_loggers, log_metrics, log_samples
from twinkle_exp.tracking.metrics_file import MetricsCSVLogger
from twinkle_exp.tracking.run_json import JobInfo
from twinkle_exp.tracking.safe_wandb import SafeWandbLogger
from twinkle_exp.tracking.trackio_logger import TrackioLogger


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


class _FakeTrackio(types.ModuleType):
    """Stands in for the trackio package in this process (the real one fixes its data directory when it is
    first imported; test_trackio.py runs it in subprocesses): records what the logger asks of it."""

    def __init__(self, fail: BaseException | None = None, runs: tuple[str, ...] = ()) -> None:
        super().__init__("trackio")
        self.fail, self.inits, self.logs, self.finished = fail, [], [], 0
        names = [types.SimpleNamespace(name=name) for name in runs]
        self.Api = lambda: types.SimpleNamespace(runs=lambda project: names)
        self.context_vars = types.SimpleNamespace(current_run=contextvars.ContextVar("run", default=None))
        self.Table = lambda columns, data: ("table", columns, data)

    def init(self, **kwargs):
        if self.fail is not None:
            raise self.fail
        self.inits.append(kwargs)
        run = types.SimpleNamespace(
            log=lambda metrics, step: self.logs.append((step, metrics)), finish=self._finish
        )
        self.context_vars.current_run.set(run)
        return run

    def _finish(self) -> None:
        self.finished += 1


def _trackio_loggers(tmp_path, wandb: bool = False, wandb_id: str | None = "abc123"):
    job = JobInfo(
        output_dir=tmp_path,
        overrides=["loss=grpo", "seed=0"],
        choices={"loss": "grpo"},
        sweep_dir="/runs/sweep_1",
        multirun=True,
    )
    logger = LoggerConfig(wandb=wandb, trackio=True, mode="offline", tags=["mine"])
    return build_loggers(OmegaConf.create({"seed": 0}), logger, None, job, wandb_id=wandb_id)


def test_trackio_run_is_named_grouped_and_configured_as_the_wandb_run_is(tmp_path, monkeypatch):
    fake = _FakeTrackio()
    monkeypatch.setitem(sys.modules, "trackio", fake)
    loggers = _trackio_loggers(tmp_path)
    assert [type(lg) for lg in loggers] == [MetricsCSVLogger, TrackioLogger]
    [init] = fake.inits
    assert (init["project"], init["name"], init["group"], init["resume"]) == (
        "twinkle_exp",
        "loss=grpo,seed=0 (abc123)",  # the id: run.json's wandb_id, the same for every attempt
        "sweep_1",
        "never",  # no run with this id yet
    )
    assert init["config"]["seed"] == 0 and init["config"]["overrides"] == ["loss=grpo", "seed=0"]
    assert init["config"]["tags"] == ["loss:grpo", "mine"] and init["config"]["job_type"] == "train"

    log_metrics(loggers, {"train/loss": 1.0}, step=3)
    log_samples(loggers, ["prompt"], [["a"]], step=3)
    loggers[1].log_summary(
        {"summary/final_accuracy": 0.5, "summary/steps_to_threshold": None, "w": ["a", "b"]}
    )
    assert fake.logs == [
        (3, {"train/loss": 1.0}),
        (3, {"samples": ("table", ["prompt"], [["a"]])}),
        (3, {"summary/final_accuracy": 0.5, "w": "a, b"}),  # at the last step; None left out
    ]
    assert fake.finished == 1 and fake.context_vars.current_run.get() is None  # trackio won't finish it again
    assert _csv_steps(tmp_path) == [3]


def test_a_resumed_run_continues_its_trackio_run_found_by_id(tmp_path, monkeypatch):
    # The first attempt ran with other overrides (a run extended with trainer.max_steps=...): same id.
    fake = _FakeTrackio(runs=("loss=grpo,seed=0 (ffff0000)", "loss=grpo,trainer.max_steps=4 (abc123)"))
    monkeypatch.setitem(sys.modules, "trackio", fake)
    _trackio_loggers(tmp_path)
    assert (fake.inits[0]["name"], fake.inits[0]["resume"]) == (
        "loss=grpo,trainer.max_steps=4 (abc123)",
        "allow",
    )


def test_a_trackio_run_without_an_id_is_never_resumed(tmp_path, monkeypatch):
    fake = _FakeTrackio(runs=("loss=grpo,seed=0",))
    monkeypatch.setitem(sys.modules, "trackio", fake)
    _trackio_loggers(tmp_path, wandb_id=None)
    assert (fake.inits[0]["name"], fake.inits[0]["resume"]) == ("loss=grpo,seed=0", "never")


def test_trackio_that_cannot_start_leaves_the_csv_alone(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "trackio", _FakeTrackio(fail=OSError("database is locked")))
    with caplog.at_level(logging.WARNING):
        loggers = _trackio_loggers(tmp_path)
    assert [type(lg) for lg in loggers] == [MetricsCSVLogger]
    assert (
        "trackio failed (start: OSError: database is locked); the run continues without trackio"
        in caplog.text
    )
    log_metrics(loggers, {"train/loss": 1.0}, step=1)
    assert _csv_steps(tmp_path) == [1]


def test_a_missing_trackio_package_refuses_the_run_before_wandb_starts(tmp_path, monkeypatch):
    import wandb

    def no_init(**kwargs):
        raise AssertionError("wandb started")

    monkeypatch.setattr(wandb, "init", no_init)
    monkeypatch.setitem(sys.modules, "trackio", None)  # what `import trackio` sees when it is not installed
    with pytest.raises(
        UserError,
        match=r"logger.trackio=true needs the trackio package .*: pip install 'twinkle_exp\[trackio\]'$",
    ):
        _trackio_loggers(tmp_path, wandb=True)


MISSING_TRACKIO = """
import sys
sys.modules["trackio"] = None  # not installed
from twinkle_exp.cli import main
sys.argv = ["twinkle_exp", *sys.argv[1:]]
main()
"""


@pytest.mark.slow
def test_the_cli_without_trackio_says_how_to_install_it_and_exits_2(tmp_path, cli_env):
    env = {**cli_env, "TWINKLE_CACHE": str(tmp_path / "cache")}
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", MISSING_TRACKIO, "debug=fast", "logger=trackio", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("twinkle_exp:")]
    assert lines == [
        "twinkle_exp: logger.trackio=true needs the trackio package (import of trackio halted; None in "
        "sys.modules): pip install 'twinkle_exp[trackio]'"
    ]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "cache").exists()  # refused before the warm-start
    assert not (run_dir / "run.json").exists() and not (run_dir / "metrics.csv").exists()
