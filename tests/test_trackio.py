"""logger=trackio: a run and a 2-job sweep logged to a Trackio project in a temporary TRACKIO_DIR, read back
through Trackio's own API and compared with each run's metrics.csv and run.json; the dashboard served by
`trackio.show` and loaded in headless Chromium finds the runs (skipped without a browser)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from browser_helpers import CHROMIUM, NO_BROWSER, chromium
from cli_run_helpers import check_ok
from trackio_helpers import csv_values, logged_values, read_project, same_values, start_dashboard

pytest.importorskip(
    "trackio", reason="the [trackio] extra is not installed: pip install 'twinkle_exp[trackio]'"
)
pytestmark = pytest.mark.slow

FAST = ["debug=fast", "logger=trackio"]


def _twinkle(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "twinkle_exp", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def logged(tmp_path_factory, cli_env) -> dict:
    """One run (trackio and CSV) and a 2-job sweep (wandb, CSV and trackio at once) into one Trackio project."""
    root = tmp_path_factory.mktemp("trackio_runs")
    env = {**cli_env, "TRACKIO_DIR": str(root / "trackio")}
    single = root / "single"
    check_ok(_twinkle([*FAST, f"hydra.run.dir={single}"], root, env))
    sweep = root / "sweep_2026"
    check_ok(_twinkle(["-m", *FAST, "logger.wandb=true", "seed=0,1", f"hydra.sweep.dir={sweep}"], root, env))
    jobs = sorted(p.parent for p in sweep.glob("*/run.json"))
    return {
        "env": env,
        "dir": root / "trackio",
        "single": single,
        "jobs": jobs,
        "runs": read_project(root / "trackio", env),
    }


def _trackio_name(run_dir: Path) -> str:
    info = json.loads((run_dir / "run.json").read_text())
    return f"{','.join(info['overrides'])} ({info['wandb_id']})"


def _check_run(run: dict, run_dir: Path) -> None:
    """Every metric of metrics.csv, at its step, with its value; the resolved config; the end-of-run summary."""
    expected = csv_values(run_dir)
    assert len(expected) > 100  # debug=fast logs some 60 keys at 6 steps
    assert same_values(logged_values(run["logs"]), expected)
    config = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
    assert run["config"]["loss"]["_target_"] == config["loss"]["_target_"]
    assert run["config"]["trainer"]["max_steps"] == config["trainer"]["max_steps"] == 4
    assert (
        "loss:grpo" in run["config"]["tags"]
        and run["config"]["overrides"] == json.loads((run_dir / "run.json").read_text())["overrides"]
    )
    summary = json.loads((run_dir / "run.json").read_text())["final"]["summary"]
    [logged] = [log for log in run["logs"] if any(k.startswith("summary/") for k in log)]
    want = {
        k: ", ".join(v) if isinstance(v, list) else v for k, v in summary.items() if k.startswith("summary/")
    }
    assert {k: logged.get(k) for k in want} == want
    assert logged["step"] == 4  # the last optimizer step
    samples = [log["samples"] for log in run["logs"] if "samples" in log]
    assert samples and samples[0]["_type"] == "trackio.table"


def test_a_run_logs_every_metric_its_config_and_summary(logged):
    run = logged["runs"][_trackio_name(logged["single"])]
    assert run["config"]["_Group"] is None  # not part of a sweep
    _check_run(run, logged["single"])


def test_a_sweep_is_one_trackio_run_per_job_grouped_by_the_sweep(logged):
    assert len(logged["jobs"]) == 2
    for job in logged["jobs"]:
        run = logged["runs"][_trackio_name(job)]
        assert run["config"]["_Group"] == "sweep_2026"  # the sweep directory's name, as wandb's group
        _check_run(run, job)
        assert len(list((job / "wandb").glob("offline-run-*"))) == 1  # wandb on as well
    assert len(logged["runs"]) == 3


@pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER)
def test_the_dashboard_shows_the_runs(logged, tmp_path):
    pytest.importorskip("websockets", reason="the browser tests talk to Chromium through websockets")
    server, url = start_dashboard(logged["dir"], logged["env"], tmp_path / "dashboard.log")
    try:
        with chromium(tmp_path, width=1400, height=900) as page:
            page.open(url)
            for job in logged["jobs"]:
                page.wait_until(f"document.body.innerText.includes({json.dumps(_trackio_name(job))})")
            page.wait_until("document.querySelectorAll('canvas, svg').length > 0")  # the plots drew
            page.screenshot(tmp_path / "dashboard.png")
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
