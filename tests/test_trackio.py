"""logger=trackio: a run and a 2-job sweep logged to a Trackio project in a temporary TRACKIO_DIR, read back
through Trackio's own API and compared with each run's metrics.csv and run.json; the dashboard served by
`trackio.show` and loaded in headless Chromium finds the runs (skipped without a browser)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from browser_helpers import CHROMIUM, NO_BROWSER, chromium
from cli_run_helpers import check_ok, run_twinkle
from trackio_helpers import csv_values, logged_values, read_project, same_values, start_dashboard

pytest.importorskip(
    "trackio", reason="the [trackio] extra is not installed: pip install 'twinkle_exp[trackio]'"
)
pytestmark = pytest.mark.slow

FAST = ["debug=fast", "logger=trackio"]


@pytest.fixture(scope="module")
def logged(tmp_path_factory, cli_env) -> dict:
    """One run resumed once (trackio and CSV) and a 2-job sweep (wandb, CSV and trackio at once), into one
    Trackio project."""
    root = tmp_path_factory.mktemp("trackio_runs")
    env = {**cli_env, "TRACKIO_DIR": str(root / "trackio")}
    single = root / "single"  # 4 steps, then extended to 8: the second attempt continues the same Trackio run
    for steps in (4, 8):
        args = [
            *FAST,
            "trainer.save_checkpoint=true",
            f"trainer.max_steps={steps}",
            f"hydra.run.dir={single}",
        ]
        check_ok(run_twinkle(args, root, env))
    sweep = root / "sweep_2026"
    # 3 rollouts a job, so that the dashboard draws lines rather than points.
    args = ["-m", *FAST, "logger.wandb=true", "trainer.max_steps=12", "seed=0,1", f"hydra.sweep.dir={sweep}"]
    check_ok(run_twinkle(args, root, env))
    jobs = sorted(p.parent for p in sweep.glob("*/run.json"))
    runs = read_project(root / "trackio", env)
    return {"env": env, "dir": root / "trackio", "single": single, "jobs": jobs, "runs": runs}


def _trackio_run(runs: dict, run_dir: Path) -> dict:
    """The one Trackio run named after the job's first attempt and its id (run.json's wandb_id)."""
    info = json.loads((run_dir / "run.json").read_text())
    [name] = [name for name in runs if name.endswith(f" ({info['wandb_id']})")]
    return runs[name]


def _check_run(run: dict, run_dir: Path) -> None:
    """Every metric of metrics.csv, at its step, with its value; the resolved config; the end-of-run summary."""
    expected = csv_values(run_dir)
    assert len(expected) > 100  # debug=fast logs some 60 keys at 6 steps
    assert same_values(logged_values(run["logs"]), expected)
    info = json.loads((run_dir / "run.json").read_text())
    config = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
    assert run["config"]["loss"]["_target_"] == config["loss"]["_target_"]
    assert run["config"]["rollout"]["group_size"] == config["rollout"]["group_size"] == 4
    assert "loss:grpo" in run["config"]["tags"] and run["config"]["overrides"] == info["overrides"]
    # What produced it, on the dashboard as in run.json (its provenance of the last attempt).
    provenance = info["provenance"]
    assert run["config"]["versions"] == provenance["versions"] and run["config"]["versions"]["torch"]
    assert run["config"]["git_commit"] == provenance["commit"] and "git_dirty" in run["config"]
    # One summary per attempt, at its last step; the last one is run.json's.
    summaries = [log for log in run["logs"] if any(k.startswith("summary/") for k in log)]
    assert len(summaries) == len(info["attempts"])
    final = info["final"]["summary"]
    want = {
        k: ", ".join(v) if isinstance(v, list) else v for k, v in final.items() if k.startswith("summary/")
    }
    assert {k: summaries[-1].get(k) for k in want} == want
    assert summaries[-1]["step"] == info["final"]["steps"]
    samples = [log["samples"] for log in run["logs"] if "samples" in log]
    assert samples and samples[0]["_type"] == "trackio.table"


def test_a_run_logs_every_metric_its_config_and_summary_over_both_attempts(logged):
    run = _trackio_run(logged["runs"], logged["single"])
    assert run["name"].startswith(
        "debug=fast,logger=trackio,trainer.save_checkpoint=true,trainer.max_steps=4 ("
    )
    assert run["config"]["_Group"] is None  # not part of a sweep
    assert len(json.loads((logged["single"] / "run.json").read_text())["attempts"]) == 2
    assert max(log["step"] for log in run["logs"]) == 8
    _check_run(run, logged["single"])


def test_a_sweep_is_one_trackio_run_per_job_grouped_by_the_sweep(logged):
    assert len(logged["jobs"]) == 2
    for job in logged["jobs"]:
        run = _trackio_run(logged["runs"], job)
        assert run["config"]["_Group"] == "sweep_2026"  # the sweep directory's name, as wandb's group
        _check_run(run, job)
        assert len(list((job / "wandb").glob("offline-run-*"))) == 1  # wandb on as well
    assert len(logged["runs"]) == 3  # the resumed run is one Trackio run


@pytest.mark.skipif(CHROMIUM is None, reason=NO_BROWSER)
def test_the_dashboard_shows_the_runs(logged, tmp_path):
    pytest.importorskip("websockets", reason="the browser tests talk to Chromium through websockets")
    server, url = start_dashboard(logged["dir"], logged["env"], tmp_path / "dashboard.log")
    try:
        with chromium(tmp_path, width=1400, height=900) as page:
            page.open(url)
            for job in logged["jobs"]:
                name = _trackio_run(logged["runs"], job)["name"]
                page.wait_until(f"document.body.innerText.includes({json.dumps(name)})")
            # The first row of plots drawn (Vega draws each chart's marks onto a canvas), then two frames.
            page.wait_until("document.querySelectorAll('.plot canvas.marks').length >= 3")
            page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            page.screenshot(tmp_path / "dashboard.png")
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
