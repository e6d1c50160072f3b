"""`python -m twinkle_exp ...` end to end, in a subprocess whose working directory is a tmp dir, not the repo."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import yaml
from wandb_records import read_run

from twinkle_exp import metric_names as M

LOSSES = ["grpo", "gspo", "sapo", "cispo", "bnpo", "drgrpo"]
DEBUG_FAST_STEPS = 4  # conf/debug/fast.yaml: trainer.max_steps
REQUIRED = [M.RATIO_MEAN, M.CLIP_REGION, M.KL, M.VAL_ACCURACY, M.LOSS]


def _check_ok(proc) -> None:
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )


def _run_dir(cwd: Path) -> Path:
    """The one Hydra run directory the command made under `cwd`."""
    found = sorted(cwd.glob("outputs/*/*/run.json"))
    assert len(found) == 1, f"expected one run under {cwd}/outputs, found {found}"
    return found[0].parent


def _csv_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _values(rows: list[dict[str, str]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key, "") != ""]


@pytest.mark.slow
@pytest.mark.parametrize("loss", LOSSES)
def test_every_loss_runs_to_finished(loss, run_cli, tmp_path):
    proc = run_cli(f"loss={loss}", "debug=fast")
    _check_ok(proc)
    out = _run_dir(tmp_path)
    status = json.loads((out / "run.json").read_text())
    assert status["status"] == "finished", status
    assert status["error"] is None
    assert status["loss"] == loss
    assert status["final"]["steps"] == DEBUG_FAST_STEPS
    assert Path(status["final"]["output_dir"]).resolve() == out.resolve()
    config = yaml.safe_load((out / ".hydra" / "config.yaml").read_text())
    from twinkle_exp.loss import LOSSES as CLASSES

    assert config["loss"]["_target_"].rsplit(".", 1)[1] == CLASSES[loss].__name__
    _, rows = _csv_rows(out / "metrics.csv")
    losses = _values(rows, M.LOSS)
    assert losses and all(math.isfinite(v) for v in losses)
    assert all(v > 0 for v in _values(rows, M.GRAD_NORM))


@pytest.mark.slow
def test_sapo_tau_reaches_config_csv_and_wandb(run_cli, tmp_path):
    proc = run_cli("loss=sapo", "loss.tau=0.5", "debug=fast")
    _check_ok(proc)
    out = _run_dir(tmp_path)
    assert json.loads((out / "run.json").read_text())["status"] == "finished"

    config = yaml.safe_load((out / ".hydra" / "config.yaml").read_text())
    assert config["loss"]["tau"] == 0.5
    assert config["loss"]["_target_"] == "twinkle_exp.loss.SAPOLoss"
    overrides = yaml.safe_load((out / ".hydra" / "overrides.yaml").read_text())
    assert "loss.tau=0.5" in overrides
    log_text = (out / "cli.log").read_text() + proc.stdout + proc.stderr
    assert "SAPOLoss(" in log_text and "tau=0.5" in log_text  # the instantiated loss, as logged by run.py

    columns, rows = _csv_rows(out / "metrics.csv")
    for key in REQUIRED:
        assert key in columns, f"{key} not in metrics.csv columns {columns}"
        assert _values(rows, key), f"{key} has no values"
    assert len(_values(rows, M.VAL_ACCURACY)) >= 2  # before the first update and after the last
    assert all(v > 0 for v in _values(rows, M.RATIO_MEAN))
    assert all(v >= 0 for v in _values(rows, M.KL))

    runs = sorted((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    files = runs[0] / "files"
    assert files.is_dir()
    summary_json = files / "wandb-summary.json"
    if summary_json.exists():  # written at finish by some wandb versions, not by all (not by 0.31 offline)
        summary = json.loads(summary_json.read_text())
        assert all(key in summary for key in REQUIRED), sorted(summary)
    [log] = sorted(runs[0].glob("*.wandb"))
    record = read_run(log)
    assert record["kinds"].get("exit") == 1, record["kinds"]  # wandb.finish() ran
    for key in REQUIRED:
        assert key in record["history"], f"{key} not logged to wandb: {sorted(record['history'])}"
        assert key in record["summary"], f"{key} not in the wandb summary"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        pytest.param(["loss=nope"], ["nope"], id="unknown-loss"),
        pytest.param(["loss.tau=abc"], ["tau", "abc"], id="tau-abc-grpo"),
        pytest.param(["loss=sapo", "loss.tau=abc"], ["tau", "abc"], id="tau-abc-sapo"),
        pytest.param(["loss=grpo", "loss.tau=0.5"], ["tau"], id="tau-on-grpo"),
        pytest.param(["rollout.group_size=abc"], ["group_size", "abc"], id="group-size-abc"),
        pytest.param(["rollout.no_such_key=1"], ["rollout.no_such_key=1", "RolloutConfig"], id="unknown-key"),
        pytest.param(["optim.lr"], ["optim.lr", "key=value"], id="unparsable"),
    ],
)
def test_bad_override_exits_nonzero_naming_it(overrides, names, run_cli, tmp_path):
    proc = run_cli(*overrides, "debug=fast", timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:]  # a usage error, like every refused setting
    # one line, as every refusal: no Hydra banner, no "Set the environment variable HYDRA_FULL_ERROR"
    assert proc.stderr.splitlines()[0] == "twinkle_exp: 1 problem(s) in the config:", proc.stderr
    assert len(proc.stderr.splitlines()) == 2, proc.stderr
    for name in names:
        assert name in proc.stderr, f"{name!r} not in stderr:\n{proc.stderr}"
    assert not list(tmp_path.glob("outputs/*/*/run.json"))  # refused at composition, before any job ran


@pytest.mark.slow
def test_invalid_value_is_refused_at_start_up(run_cli, tmp_path):
    # Composes (SAPO's tau is a float) but the loss class's own check refuses it, before any job starts.
    proc = run_cli("loss=sapo", "loss.tau=-1", "debug=fast", timeout=300)
    assert proc.returncode == 2
    assert "loss.tau must be > 0, got -1" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("outputs/*/*/run.json"))


@pytest.mark.slow
def test_help_lists_groups_and_choices(run_cli, tmp_path):
    proc = run_cli("--help", timeout=120)
    _check_ok(proc)
    lines = proc.stdout.splitlines()
    from twinkle_exp.loss import LOSSES

    assert "loss: " + ", ".join(sorted(LOSSES)) in lines, proc.stdout  # every registered loss, the zoo's too
    for group in ("policy", "task", "reward", "rollout", "advantage", "optim", "trainer", "logger", "warmup"):
        assert any(line.startswith(f"{group}: ") for line in lines), group
    assert not (tmp_path / "outputs").exists()
