"""The sweep report on hand-built sweeps: numbers checked against values computed by hand, statuses, data
problems, grouping over several directories. Statistics, checks and run summaries have their own test files."""

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
from scipy import stats

from twinkle_exp.report.__main__ import main
from twinkle_exp.report.loading.runs import load_runs
from twinkle_exp.report.statistics.aggregate import curve, summarize
from twinkle_exp.tracking.metrics_csv import read_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GRPO = "loss=grpo, trainer.max_steps=10"
SAPO = "loss=sapo, loss.tau=0.5, trainer.max_steps=10"
# Comparisons and plots name variants without the overrides they all share (trainer.max_steps=10).
GRPO_SHORT, SAPO_SHORT = "loss=grpo", "loss=sapo, loss.tau=0.5"
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
    # Seed 1 validated at other steps (0, 5, 8) than seed 0 (0, 5, 10), and stopped earlier.
    rows = lightning_rows({0: 0.0, 5: 0.3, 8: 0.55}, 8, kl_per_step=None)
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


def md_section(text: str, heading: str) -> str:
    """The lines under `## heading`, up to the next heading."""
    return text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


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
    for name in ("val_accuracy.png", "reward.png", "kl.png", "clip_fraction.png", "intervals.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC)
        height, width, _ = imread(out / name).shape
        assert height > 300 and width > 500
    assert not (out / "entropy.png").exists()  # no run logged train/entropy

    text = (out / "report.md").read_text()
    rows = md_rows(text)
    assert "All variants share trainer.max_steps=10; comparisons and plots leave it out" in text
    # AUC over steps 0-8, the span every finished run covers (sapo's seed 1 stops at 8): grpo seed 0 is
    # (5 (0.1 + 0.4) / 2 + 3 (0.4 + 0.52) / 2) / 8 = 0.32875 (0.52 interpolated at step 8), seed 1 0.42875.
    # Two seeds: t(0.975, 1) = 12.71 times se 0.05 reaches past [0, 100], where the interval is cut.
    # Final: 0.6, 0.7 -> 65.0, 65 - 63.5 = 1.5. Steps to 50% within step 8 (the earliest last validation):
    # seed 0 reached it at 10 (counts 8), seed 1 at 5 -> 6.5, 1 of 2 by step 8; KL 0.02, 0.04 -> 0.03.
    assert rows[GRPO_SHORT] == [  # AUC first: the headline score; then final accuracy
        GRPO_SHORT,
        "2/4",
        "37.9 [0.0, 100.0]",
        "37.9",  # IQM = mean with fewer than 4 seeds
        "65.0 [1.5, 100.0]",
        "65.0",
        "6.5 [0.0, 8.0] (1/2 by step 8)",
        "0.03",
        "2 min 30 s",
    ]
    # sapo: AUC 1.44 / 8 = 0.18 and (0.75 + 1.275) / 8 = 0.253125; finals 0.3, 0.55; only seed 1 reaches 0.5,
    # at step 8, and seed 0 never does (counts 8); beta=0 so no KL.
    assert rows[SAPO_SHORT][2:7] == [
        "21.7 [0.0, 68.1]",
        "21.7",
        "42.5 [0.0, 100.0]",
        "42.5",
        "8.0 [8.0, 8.0] (1/2 by step 8)",
    ]
    assert rows[SAPO_SHORT][7:] == ["–", "1 min 00 s"]
    assert "AUC over steps 0-8, the span every finished run covers" in text
    # The page says it leaves the shared override out of the names: nowhere do the full labels appear.
    assert GRPO not in text and SAPO not in text
    assert rows["grpo/seed=0"][1] == GRPO_SHORT

    # One pair per score, oriented best first; the family of 1 pair x 2 scores is stated, Holm-adjusted.
    assert "Family: every pair on every score, 1 pair x 2 scores = 2 tests, Holm" in text
    pair = f"{GRPO_SHORT} vs {SAPO_SHORT}"
    pairs = md_rows(md_section(text, "Pairwise comparisons: final accuracy"))
    welch = stats.ttest_ind([0.6, 0.7], [0.3, 0.55], equal_var=False)
    low, high = welch.confidence_interval()
    assert pairs[pair][1] == "Welch t, 2 vs 2 seeds"  # these runs record no provenance: never paired
    assert pairs[pair][2] == f"+22.5 [{low * 100:+.1f}, {high * 100:+.1f}] pp"
    # Holm over two tests: the larger raw p of the two is the adjusted one, the smaller doubled.
    auc_p = stats.ttest_ind([0.32875, 0.42875], [0.18, 0.253125], equal_var=False).pvalue
    assert float(pairs[pair][3]) == pytest.approx(max(welch.pvalue, min(1, 2 * auc_p)), rel=1e-2)
    # Both grpo seeds beat both sapo seeds: P(improvement) = 1, at its bound, with a non-degenerate interval.
    assert pairs[pair][4].startswith("1.00 [0.39, 1.00] (at its bound)")
    assert pairs[pair][5] == "±2.0 pp" and pairs[pair][8] == "inconclusive"
    assert "inconclusive: difference +22.5" in text and "seeds per variant" in text
    for old in ("not distinguishable", "higher", "seeds needed", "bootstrap"):
        assert old not in md_section(text, "Pairwise comparisons: final accuracy")
    assert "⚠ 4 runs record no provenance" in md_section(text, "Provenance")

    verdicts = list(csv.DictReader((out / "verdicts.csv").open()))
    assert [(r["score"], r["verdict"], r["paired"]) for r in verdicts] == [
        ("AUC", "inconclusive", "False"),
        ("final accuracy", "inconclusive", "False"),
    ]
    assert float(verdicts[1]["p_raw"]) == pytest.approx(welch.pvalue)
    assert float(verdicts[1]["low"]) == pytest.approx(low) and verdicts[1]["margin"] == "0.02"
    document = json.loads((out / "verdicts.json").read_text())
    assert document["family"]["size"] == 2 and document["family"]["adjustment"] == "holm"
    grpo_final = next(
        r for r in document["scores"] if r["variant"] == GRPO_SHORT and r["score"] == "final accuracy"
    )
    assert grpo_final["values"] == pytest.approx([0.6, 0.7]) and grpo_final["seeds"] == [0, 1]
    assert document["steps_to_threshold"][0]["fraction_reached"] == 0.5

    assert rows["grpo/seed=2"][3] == "running"
    assert rows["grpo/seed=3"][3] == "not started"
    failed = rows["loss=sapo,loss.tau=0.5,seed=2"]
    assert failed[3] == "failed" and failed[5] == "RuntimeError: CUDA out of memory"
    assert rows["grpo/seed=0"][3] == "finished" and rows["grpo/seed=0"][4] == "1 min 40 s"
    assert "7 jobs: 4 finished, 1 running, 1 failed, 1 not started" in text
    # The failed job's file ends mid-row: said in the report and on stderr, not hidden.
    assert (
        "## Data problems" in text
        and "the last line ('0,3,,0.0') has no line end (cut short): dropped" in text
    )
    assert "## Checks" in text and "✓ passed: strictly on-policy updates" in text

    page = (out / "report.html").read_text()
    embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(embedded) == 5
    assert base64.b64decode(embedded[0]) == (out / "val_accuracy.png").read_bytes()
    assert "65.0 [1.5, 100.0]" in page and "CUDA out of memory" in page
    assert GRPO not in page and f"<td>{GRPO_SHORT}</td>" in page

    captured = capsys.readouterr()
    assert "65.0 [1.5," in captured.out and str(out / "report.html") in captured.out
    assert "data problem:" in captured.err and "cut short" in captured.err


def test_summary_values_and_threshold(sweep: Path) -> None:
    stats = {s.label: s for s in summarize(load_runs([sweep]), threshold=0.5)}
    grpo, sapo = stats[GRPO], stats[SAPO]
    assert grpo.final_accuracy == pytest.approx([0.6, 0.7])
    assert grpo.scores["AUC"] == pytest.approx([0.32875, 0.42875])  # over steps 0-8, the shared span
    assert grpo.estimates["final accuracy"].value == pytest.approx(0.65)
    assert grpo.kl_mean == pytest.approx(0.03) and sapo.kl_mean is None
    assert sapo.threshold.reached == 1 and sapo.threshold.runs == sapo.evaluated == 2
    assert sapo.threshold.horizon == 8 and sapo.threshold.value == pytest.approx(8.0)
    strict = {s.label: s for s in summarize(load_runs([sweep]), threshold=0.65)}
    # grpo's seed 1 gets to 0.7 at step 10, past the horizon: no run reached 65% by step 8.
    assert strict[GRPO].threshold.reached == 0 and strict[SAPO].threshold.reached == 0


def test_loader_sparse_duplicate_and_truncated_rows(sweep: Path) -> None:
    metrics = read_metrics(sweep / "grpo/seed=0/metrics.csv")
    assert metrics.series["val/accuracy"] == [(0, 0.1), (5, 0.4), (10, 0.6)]
    assert dict(metrics.series["train/reward_mean"])[3] == pytest.approx(0.3)
    assert metrics.problems == [] and metrics.nonfinite == {}
    partial = read_metrics(sweep / "loss=sapo,loss.tau=0.5,seed=2/metrics.csv")
    assert partial.series["train/reward_mean"][-1] == (2, pytest.approx(0.1))
    assert "train/clip_ratio/low_mean" not in dict(partial.series)  # the cut row is dropped whole
    assert partial.series["val/accuracy"] == [(0, 0.05)]
    assert len(partial.problems) == 1 and "cut short" in partial.problems[0]


def test_a_short_row_inside_the_file_is_dropped_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text("step,val/accuracy,train/kl\n0,0.25,0.1\n4,0.5\n8,0.75,0.3\n")
    metrics = read_metrics(path)
    assert metrics.series == {"val/accuracy": [(0, 0.25), (8, 0.75)], "train/kl": [(0, 0.1), (8, 0.3)]}
    assert metrics.problems == [
        "metrics.csv line 3: 2 cells where the header has 3 (cut short: the run stopped mid-write); "
        "the row is dropped, its last cell may be cut"
    ]


def test_nonfinite_and_garbled_cells_are_counted_not_averaged(tmp_path: Path) -> None:
    rows = lightning_rows({0: 0.2, 5: 0.6}, 5, kl_per_step=0.01)
    rows[3]["train/kl"], rows[4]["train/kl"], rows[5]["train/reward_mean"] = "nan", "inf", "oops"
    write_job(tmp_path, "0", ["loss=grpo", "seed=0"], status="finished", rows=rows, wall=5.0)
    metrics = read_metrics(tmp_path / "0" / "metrics.csv")
    assert metrics.nonfinite == {"train/kl": [rows[3]["step"], rows[4]["step"]]}
    assert (
        all(math.isfinite(v) for _, v in metrics.series["train/kl"]) and len(metrics.series["train/kl"]) == 3
    )
    assert metrics.problems == [
        "metrics.csv: 1 cells are not numbers (first at line 7, column 'train/reward_mean'); they were skipped"
    ]


@pytest.mark.parametrize("damage", ["binary", "no_header", "missing"])
def test_unreadable_metrics_are_reported_and_strict_fails(tmp_path: Path, capsys, damage: str) -> None:
    sweep = tmp_path / "sweep"
    write_job(
        sweep,
        "0",
        ["loss=grpo", "seed=0"],
        status="finished",
        rows=lightning_rows({0: 0.2}, 2, None),
        wall=1.0,
    )
    rows = lightning_rows({0: 0.3, 2: 0.5}, 2, None)
    job = write_job(sweep, "1", ["loss=grpo", "seed=1"], status="finished", rows=rows, wall=1.0)
    csv_path = job / "metrics.csv"
    if damage == "binary":
        csv_path.write_bytes(csv_path.read_bytes()[:120] + b"\xff\xfe\x00garbage\n")
        expected = "metrics.csv unreadable after byte"
    elif damage == "no_header":
        csv_path.write_text("")
        expected = "has no 'step' column"
    else:
        csv_path.unlink()
        expected = "finished, but metrics.csv is missing"
    assert main([str(sweep)]) == 0
    assert expected in (sweep / "report" / "report.md").read_text()
    assert expected in capsys.readouterr().err
    assert main([str(sweep), "--strict"]) == 3


def test_curve_forward_fills_within_each_runs_range() -> None:
    seed0 = [(0, 0.1), (5, 0.2), (10, 0.3)]
    seed1 = [(0, 0.0), (4, 0.3), (8, 0.55)]
    c = curve([seed0, seed1])
    assert c.steps.tolist() == [0, 4, 5, 8, 10]
    # step 4: seed 0 still at 0.1; step 10: seed 1 stopped at 8, so only seed 0 counts.
    np.testing.assert_allclose(c.mean, [0.05, 0.2, 0.25, 0.375, 0.3])
    # Band: the t interval of the mean of the 2 seeds at each step; with 1 seed there is none.
    pairs = [(0.1, 0.0), (0.1, 0.3), (0.2, 0.3), (0.2, 0.55)]
    expected = [stats.t.interval(0.95, 1, np.mean(p), stats.sem(p)) for p in pairs]
    np.testing.assert_allclose(c.low, [lo for lo, _ in expected] + [np.nan])
    np.testing.assert_allclose(c.high, [hi for _, hi in expected] + [np.nan])


def test_missing_metric_skips_plot_and_out_dir(tmp_path: Path) -> None:
    sweep, out = tmp_path / "sweep", tmp_path / "elsewhere"
    rows = lightning_rows({0: 0.2, 5: 0.6}, 5, kl_per_step=None)
    write_job(sweep, "0", ["loss=sapo", "seed=0"], status="finished", rows=rows, wall=5.0)
    assert main([str(sweep), "--out", str(out)]) == 0
    assert not (sweep / "report").exists()
    assert not (out / "kl.png").exists() and (out / "val_accuracy.png").is_file()
    text = (out / "report.md").read_text()
    assert "skipped, no run logged train/kl" in text
    assert md_rows(text)["loss=sapo"][4] == "60.0 (n=1)"  # final accuracy, after the AUC columns
    assert "1 vs" not in text  # one variant: no pairs


def two_sweeps(tmp_path: Path) -> tuple[Path, Path]:
    """A first sweep (seeds 0, 1) and a later one adding seed 2, with the loss written two ways."""
    first, later = tmp_path / "multirun" / "first", tmp_path / "multirun" / "later"
    for seed, acc in ((0, 0.5), (1, 0.6)):
        rows = lightning_rows({0: 0.1, 10: acc}, 10, None)
        write_job(
            first,
            f"{seed}_loss=sapo",
            ["loss=sapo", "loss.tau=0.5", f"seed={seed}"],
            status="finished",
            rows=rows,
            wall=1.0,
        )
        rows = lightning_rows({0: 0.1, 10: acc - 0.2}, 10, None)
        write_job(
            first, f"{seed}_loss=grpo", ["loss=grpo", f"seed={seed}"], status="finished", rows=rows, wall=1.0
        )
    rows = lightning_rows({0: 0.1, 10: 0.7}, 10, None)
    job = write_job(
        later,
        "0_loss=sapo",
        ["loss=sapo", "loss.tau=0.50", "seed=2", "trainer.max_steps=10"],
        status="finished",
        rows=rows,
        wall=1.0,
    )
    # The later sweep's resolved config and Hydra's choices, as Hydra writes them beside overrides.yaml.
    (job / ".hydra" / "config.yaml").write_text("loss:\n  _target_: twinkle_exp.loss.SAPOLoss\n  tau: 0.5\n")
    (job / ".hydra" / "hydra.yaml").write_text("hydra:\n  runtime:\n    choices:\n      loss: sapo\n")
    return first, later


def test_group_by_merges_seeds_across_sweep_directories(tmp_path: Path) -> None:
    first, later = two_sweeps(tmp_path)
    out = tmp_path / "combined"
    assert main([str(first), str(later), "--group-by", "loss,loss.tau", "--out", str(out)]) == 0
    rows = md_rows((out / "report.md").read_text())
    # sapo: seeds 0, 1 from the first sweep and seed 2 from the later one (tau written 0.50 there, 0.5 in
    # its config): 0.5, 0.6, 0.7 -> 60.0 +- t(0.975, 2) 4.30 x se 0.0577 = 24.8.
    sapo, grpo = rows["loss=sapo, loss.tau=0.5"], rows["loss=grpo"]
    assert [sapo[1], sapo[4]] == ["3/3", "60.0 [35.2, 84.8]"]  # seeds, final accuracy (after the AUC columns)
    # GRPO has no tau: left out of its label. 0.3, 0.4 -> 35.0 +- 12.71 x 0.05, cut at 0.
    assert [grpo[1], grpo[4]] == ["2/2", "35.0 [0.0, 98.5]"]
    assert "first/0_loss=sapo" in rows and "later/0_loss=sapo" in rows  # job names relative to multirun/


def test_a_seed_run_twice_is_counted_and_said(tmp_path: Path, capsys) -> None:
    first, later = two_sweeps(tmp_path)
    rows = lightning_rows({0: 0.1, 10: 0.4}, 10, None)
    write_job(later, "1_loss=grpo", ["loss=grpo", "seed=0"], status="finished", rows=rows, wall=1.0)
    out = tmp_path / "combined"
    assert main([str(first), str(later), "--group-by", "loss", "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert md_rows(text)["loss=grpo"][1] == "3/3"
    assert "later/1_loss=grpo: seed 0 of loss=grpo also ran in first/0_loss=grpo" in text


def test_default_grouping_keeps_differently_written_overrides_apart(tmp_path: Path) -> None:
    first, later = two_sweeps(tmp_path)
    out = tmp_path / "combined"
    assert main([str(first), str(later), "--out", str(out)]) == 0
    labels = {row[0] for row in md_rows((out / "report.md").read_text()).values()}
    assert {"loss=sapo, loss.tau=0.5", "loss=sapo, loss.tau=0.50, trainer.max_steps=10"} <= labels


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--group-by", "loss.tua", "--out", "o"], "no run has 'loss.tua'"),
        (["--group-by", "loss,,seed", "--out", "o"], "--group-by takes comma-separated config keys"),
        (["--group-by", "seed", "--out", "o"], "seeds are what is averaged"),
        (["--score", "train/nope", "--out", "o"], "--score train/nope: no run logged this metric"),
        ([], "--out is required when several directories are compared"),
    ],
)
def test_usage_errors_name_the_problem(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    first, later = two_sweeps(tmp_path)
    assert main([str(first), str(later), *[str(tmp_path / a) if a == "o" else a for a in argv]]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


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


def test_a_finished_run_whose_metrics_csv_was_cut_is_left_out_saying_why(tmp_path: Path) -> None:
    root = tmp_path / "sweep"
    full = lightning_rows({0: 0.1, 5: 0.3, 10: 0.6}, 10, kl_per_step=0.002)
    cut = [r for r in lightning_rows({0: 0.1, 5: 0.3, 10: 0.6}, 10, kl_per_step=0.002) if r["step"] <= 6]
    for seed, rows in ((0, full), (1, cut)):
        job = write_job(root, f"seed={seed}", [f"seed={seed}"], status="finished", rows=rows, wall=10.0)
        info = json.loads((job / "run.json").read_text())
        info["final"] = {"steps": 10, "accuracy_after": 0.6 if seed == 0 else 0.422}
        (job / "run.json").write_text(json.dumps(info))
    runs = {run.name: run for run in load_runs([root])}
    assert runs["seed=1"].metrics == {}  # its curve would pass for the whole run (final 30% at step 6)
    [problem] = runs["seed=1"].problems
    assert problem == (
        "finished at step 10 (run.json, final val/accuracy 42.2%), but metrics.csv has no val/accuracy at "
        "that step (its rows end at step 6: cut short or replaced): left out of the statistics and plots"
    )
    assert runs["seed=0"].problems == []
    [stats] = summarize(list(runs.values()), threshold=0.5)
    assert stats.final_accuracy == pytest.approx([0.6]) and stats.evaluated == 1


def test_pass_at_k_curves_are_plotted_per_variant_when_the_runs_sampled(tmp_path: Path) -> None:
    """Runs with val/pass@1, 2, 4 at their first and last validation (trainer.val_samples): one plot of
    pass@k against k, a line and band per variant; a sweep without them has no such plot or line."""
    from twinkle_exp import metric_names as M
    from twinkle_exp.report.rendering.plots_pass_at_k import FILENAME, TITLE, logged_ks

    sweep = tmp_path / "multirun"
    keys = [M.VAL_PASS_AT + str(k) for k in (1, 2, 4)]
    for loss, gain in (("grpo", 0.3), ("sapo", 0.1)):
        for seed in range(3):
            job = write_job(
                sweep, f"{loss}_{seed}", [f"loss={loss}", f"seed={seed}"], status="finished", wall=1.0
            )
            with (job / "metrics.csv").open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=["step", "val/accuracy", *keys])
                writer.writeheader()
                for step, lift in ((0, 0.0), (10, gain)):
                    row = {"step": step, "val/accuracy": 0.2 + lift}
                    row.update(
                        {
                            key: min(1.0, 0.1 * k + lift + 0.01 * seed)
                            for key, k in zip(keys, (1, 2, 4), strict=True)
                        }
                    )
                    writer.writerow(row)
    assert logged_ks(load_runs([sweep])) == [1, 2, 4]
    assert main([str(sweep)]) == 0
    image = imread(sweep / "report" / FILENAME)
    assert image.ndim == 3 and image.shape[0] > 100
    assert image[..., :3].std() > 0.05  # lines and bands drawn, not a blank canvas
    assert TITLE in (sweep / "report" / "report.md").read_text()

    plain = tmp_path / "plain"
    write_job(
        plain,
        "0",
        ["loss=sapo", "seed=0"],
        status="finished",
        rows=lightning_rows({0: 0.2, 5: 0.6}, 5, None),
        wall=1.0,
    )
    assert main([str(plain)]) == 0
    assert not (plain / "report" / FILENAME).exists()
    assert "pass@k" not in (plain / "report" / "report.md").read_text()
