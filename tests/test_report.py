"""The sweep report on a hand-built sweep: numbers checked against values computed by hand."""

from __future__ import annotations

import base64
import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from twinkle_exp.report.__main__ import main
from twinkle_exp.report.aggregate import curve, summarize
from twinkle_exp.report.runs import load_metrics, load_sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GRPO = "loss=grpo, trainer.max_steps=10"
SAPO = "loss=sapo, loss.tau=0.5, trainer.max_steps=10"
HEADER = [
    "epoch",
    "step",
    "train/clip_ratio/high_mean",
    "train/clip_ratio/low_mean",
    "train/clip_ratio/region_mean",
    "train/kl",
    "train/reward_mean",
    "val/accuracy",
]


def lightning_rows(val: dict[int, float], last_step: int, kl_per_step: float | None) -> list[dict]:
    """Sparse rows as Lightning's CSVLogger writes them: train rows and validation rows apart."""
    rows = []
    for step in range(last_step + 1):
        if step in val:
            rows.append({"epoch": 0, "step": step, "val/accuracy": val[step]})
        if step > 0:
            row = {
                "epoch": 0,
                "step": step,
                "train/reward_mean": 0.05 * step,
                "train/clip_ratio/region_mean": 0.01,
            }
            if kl_per_step is not None:
                row["train/kl"] = kl_per_step * step
            rows.append(row)
    return rows


def write_job(
    sweep: Path,
    name: str,
    overrides: list[str],
    *,
    status: str | None,
    rows: list[dict] | None = None,
    wall: float | None = None,
    error: str | None = None,
    truncated_tail: str = "",
) -> Path:
    job = sweep / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    if status is not None:
        seed = next(int(o.split("=")[1]) for o in overrides if o.startswith("seed="))
        info = {
            "status": status,
            "overrides": overrides,
            "loss": overrides[0].split("=")[1],
            "seed": seed,
            "started_at": "2026-11-29T18:00:00",
            "wall_time_s": wall,
            "error": error,
        }
        (job / "run.json").write_text(json.dumps(info))
    if rows is not None:
        with (job / "metrics.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=HEADER)
            writer.writeheader()
            writer.writerows(rows)
            f.write(truncated_tail)
    return job


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """2 variants x 2 finished seeds, plus a running, a failed and a not-started job; some jobs nested."""
    root = tmp_path / "multirun"
    grpo = ["loss=grpo", "trainer.max_steps=10"]
    sapo = ["loss=sapo", "loss.tau=0.5", "trainer.max_steps=10"]
    rows = lightning_rows({0: 0.1, 5: 0.4, 10: 0.6}, 10, kl_per_step=0.002)
    # Two micro-steps logged at step 3: the loader averages them (0.2 and 0.4 -> 0.3).
    rows += [{"step": 3, "train/reward_mean": 0.2}, {"step": 3, "train/reward_mean": 0.4}]
    rows = [r for r in rows if not (r["step"] == 3 and "train/kl" in r)]
    write_job(root, "grpo/seed=0", [grpo[0], "seed=0", grpo[1]], status="finished", rows=rows, wall=100.0)
    rows = lightning_rows({0: 0.2, 5: 0.5, 10: 0.7}, 10, kl_per_step=0.004)
    write_job(root, "grpo/seed=1", [grpo[0], "seed=1", grpo[1]], status="finished", rows=rows, wall=200.0)
    rows = lightning_rows({0: 0.1}, 3, kl_per_step=0.001)
    write_job(root, "grpo/seed=2", [grpo[0], "seed=2", grpo[1]], status="running", rows=rows)
    write_job(root, "grpo/seed=3", [grpo[0], "seed=3", grpo[1]], status=None)

    rows = lightning_rows({0: 0.1, 5: 0.2, 10: 0.3}, 10, kl_per_step=None)
    write_job(
        root, "loss=sapo,loss.tau=0.5,seed=0", [*sapo, "seed=0"], status="finished", rows=rows, wall=50.0
    )
    # Seed 1 validated at other steps (0, 4, 8) than seed 0 (0, 5, 10).
    rows = lightning_rows({0: 0.0, 4: 0.3, 8: 0.55}, 8, kl_per_step=None)
    write_job(
        root, "loss=sapo,loss.tau=0.5,seed=1", [*sapo, "seed=1"], status="finished", rows=rows, wall=70.0
    )
    rows = lightning_rows({0: 0.05}, 2, kl_per_step=None)
    write_job(
        root,
        "loss=sapo,loss.tau=0.5,seed=2",
        [*sapo, "seed=2"],
        status="failed",
        rows=rows,
        error="RuntimeError: CUDA out of memory",
        truncated_tail="0,3,,0.0",  # the process died mid-row
    )
    return root


def md_rows(text: str) -> dict[str, list[str]]:
    """Markdown table rows keyed by their first cell."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0]] = cells
    return rows


def test_report_numbers_files_and_statuses(sweep: Path, capsys) -> None:
    assert main([str(sweep), "--threshold", "0.5"]) == 0
    out = sweep / "report"
    for name in ("val_accuracy.png", "reward.png", "kl.png", "clip_fraction.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC)
        height, width, _ = imread(out / name).shape
        assert height > 300 and width > 500

    rows = md_rows((out / "report.md").read_text())
    # grpo: finals 0.6, 0.7 -> 65.0 ± 7.07; threshold at steps 10 and 5 (0.5 counts) -> 7.5; KL 0.02, 0.04.
    assert rows[GRPO] == [GRPO, "2/4", "65.0 ± 7.1 (n=2)", "7.5 (2/2)", "0.03", "2 min 30 s"]
    # sapo: finals 0.3, 0.55 -> 42.5 ± 17.68; only seed 1 reaches 0.5, at step 8; beta=0 so no KL.
    assert rows[SAPO] == [SAPO, "2/3", "42.5 ± 17.7 (n=2)", "8.0 (1/2)", "–", "1 min 00 s"]

    assert rows["grpo/seed=2"][3] == "running"
    assert rows["grpo/seed=3"][3] == "not started"
    failed = rows["loss=sapo,loss.tau=0.5,seed=2"]
    assert failed[3] == "failed" and failed[5] == "RuntimeError: CUDA out of memory"
    assert rows["grpo/seed=0"][3] == "finished" and rows["grpo/seed=0"][4] == "1 min 40 s"
    assert "7 jobs: 4 finished, 1 running, 1 failed, 1 not started" in (out / "report.md").read_text()

    page = (out / "report.html").read_text()
    embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(embedded) == 4
    assert base64.b64decode(embedded[0]) == (out / "val_accuracy.png").read_bytes()
    assert "65.0 ± 7.1 (n=2)" in page and "CUDA out of memory" in page

    terminal = capsys.readouterr().out
    assert "65.0 ± 7.1" in terminal and str(out / "report.html") in terminal


def test_summary_values_and_threshold(sweep: Path) -> None:
    stats = {s.label: s for s in summarize(load_sweep(sweep), threshold=0.5)}
    grpo, sapo = stats[GRPO], stats[SAPO]
    assert grpo.accuracy_mean == pytest.approx(0.65)
    assert grpo.accuracy_std == pytest.approx(math.sqrt(2 * 0.05**2))
    assert sapo.accuracy_std == pytest.approx(math.sqrt(2 * 0.125**2))
    assert grpo.kl_mean == pytest.approx(0.03) and sapo.kl_mean is None
    assert sapo.steps_to_threshold == [8]
    strict = {s.label: s for s in summarize(load_sweep(sweep), threshold=0.65)}
    assert strict[GRPO].steps_to_threshold == [10] and strict[SAPO].steps_to_threshold == []


def test_loader_sparse_duplicate_and_truncated_rows(sweep: Path) -> None:
    metrics = load_metrics(sweep / "grpo/seed=0/metrics.csv")
    assert metrics["val/accuracy"] == [(0, 0.1), (5, 0.4), (10, 0.6)]
    assert dict(metrics["train/reward_mean"])[3] == pytest.approx(0.3)
    partial = load_metrics(sweep / "loss=sapo,loss.tau=0.5,seed=2/metrics.csv")
    assert partial["train/reward_mean"][-1] == (2, pytest.approx(0.1))  # the cut row's step 3 has no reward
    assert partial["val/accuracy"] == [(0, 0.05)]


def test_curve_forward_fills_within_each_runs_range() -> None:
    seed0 = [(0, 0.1), (5, 0.2), (10, 0.3)]
    seed1 = [(0, 0.0), (4, 0.3), (8, 0.55)]
    c = curve([seed0, seed1])
    assert c.steps.tolist() == [0, 4, 5, 8, 10]
    # step 4: seed 0 still at 0.1; step 10: seed 1 stopped at 8, so only seed 0 counts.
    np.testing.assert_allclose(c.mean, [0.05, 0.2, 0.25, 0.375, 0.3])
    np.testing.assert_allclose(c.low, [0.0, 0.1, 0.2, 0.2, 0.3])
    np.testing.assert_allclose(c.high, [0.1, 0.3, 0.3, 0.55, 0.3])


def test_missing_metric_skips_plot_and_out_dir(tmp_path: Path) -> None:
    sweep, out = tmp_path / "sweep", tmp_path / "elsewhere"
    rows = lightning_rows({0: 0.2, 5: 0.6}, 5, kl_per_step=None)
    write_job(sweep, "0", ["loss=sapo", "seed=0"], status="finished", rows=rows, wall=5.0)
    assert main([str(sweep), "--out", str(out)]) == 0
    assert not (sweep / "report").exists()
    assert not (out / "kl.png").exists() and (out / "val_accuracy.png").is_file()
    text = (out / "report.md").read_text()
    assert "skipped, no run logged `train/kl`" in text
    assert md_rows(text)["loss=sapo"][2] == "60.0 (n=1)"


@pytest.mark.parametrize("case", ["missing", "empty"])
def test_no_runs_exits_2_and_writes_nothing(tmp_path: Path, capsys, case: str) -> None:
    target = tmp_path / case
    if case == "empty":
        (target / "not_a_job").mkdir(parents=True)
        (target / "not_a_job" / "notes.txt").write_text("hello")
    assert main([str(target)]) == 2
    err = capsys.readouterr().err
    assert f"no runs found under {target}" in err and "Traceback" not in err
    assert not (target / "report").exists()


def test_bad_threshold_is_a_usage_error(sweep: Path, capsys) -> None:
    assert main([str(sweep), "--threshold", "50"]) == 2
    assert "--threshold" in capsys.readouterr().err
    assert not (sweep / "report").exists()
