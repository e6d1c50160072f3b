"""End-of-run summary: figures for dashboards (run.json, wandb summary) and the printed warnings."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from rich.console import Console

from twinkle_exp import metric_names as M
from twinkle_exp.summary.run_summary import (
    WARNINGS,
    plain_config,
    print_run_summary,
    print_warnings,
    run_figures,
    summarize_run,
)


def test_run_figures_by_hand() -> None:
    accuracy = [(0, 0.4), (40, 0.45), (80, 0.6), (120, 0.55)]
    figures = run_figures({M.VAL_ACCURACY: accuracy, M.REWARD_MEAN: [(4, 0.1)]}, wall_time_s=12.34)
    # AUC: 40 (0.4+0.45)/2 + 40 (0.45+0.6)/2 + 40 (0.6+0.55)/2 = 17 + 21 + 23 = 61, over 120 steps.
    assert figures == {
        M.SUMMARY_FINAL_ACCURACY: 0.55,
        M.SUMMARY_ACCURACY_AUC: pytest.approx(61 / 120),
        M.SUMMARY_STEPS_TO_THRESHOLD: 80,
        M.SUMMARY_THRESHOLD: 0.5,
        M.SUMMARY_WALL_TIME: 12.3,
    }
    assert run_figures({M.VAL_ACCURACY: accuracy}, None, threshold=0.9)[M.SUMMARY_STEPS_TO_THRESHOLD] is None
    empty = run_figures({}, 1.0)
    assert empty[M.SUMMARY_FINAL_ACCURACY] is None and empty[M.SUMMARY_ACCURACY_AUC] is None


def write_csv(path: Path, rows: list[dict]) -> None:
    keys = ["step"] + sorted({k for row in rows for k in row} - {"step"})
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def test_summarize_run_reads_the_csv_and_finds_the_traps(tmp_path: Path) -> None:
    rows = [{"step": 0, M.VAL_ACCURACY: 0.3}]
    rows += [
        {"step": s, M.GRAD_NORM: 2.5, M.RATIO_MIN: 1.0, M.RATIO_MAX: 1.0, M.LOSS: 0.1} for s in range(1, 9)
    ]
    rows += [{"step": 8, M.VAL_ACCURACY: 0.6}, {"step": 9, M.LOSS: "nan"}]
    write_csv(tmp_path / "metrics.csv", rows)
    cfg = OmegaConf.create({"optim": {"mu": 1, "num_minibatches": 1, "max_grad_norm": 1.0}})
    summary = summarize_run(tmp_path / "metrics.csv", cfg, 3.0, loggers=[])
    assert summary[M.SUMMARY_FINAL_ACCURACY] == 0.6 and summary[M.SUMMARY_STEPS_TO_THRESHOLD] == 8
    assert summary[M.SUMMARY_WARNINGS] == ["on_policy", "grad_clip_every_step", "nonfinite"]
    assert [w["check"] for w in summary[WARNINGS]] == summary[M.SUMMARY_WARNINGS]
    json.dumps(summary)  # it goes into run.json as it is

    out = io.StringIO()
    print_warnings(summary, Console(file=out, width=100))
    paragraphs = [" ".join(p.split()) for p in out.getvalue().split("⚠")[1:]]
    assert len(paragraphs) == 3
    assert paragraphs[1].startswith(
        "gradient-norm clipping on every step: train/grad_norm > optim.max_grad_norm = 1"
    )
    assert paragraphs[2].startswith(
        "non-finite values: NaN or inf from step 9: train/loss (1 steps). → lower"
    )


def test_summarize_run_passes_on_data_problems(tmp_path: Path) -> None:
    (tmp_path / "metrics.csv").write_text("step,val/accuracy\n0,0.3\n8,0.6\n9,0.")
    summary = summarize_run(tmp_path / "metrics.csv", {}, None, loggers=[])
    assert summary[M.SUMMARY_FINAL_ACCURACY] == 0.6
    assert summary[WARNINGS][0]["check"] == "data" and "cut short" in summary[WARNINGS][0]["evidence"]


def test_the_summary_prints_its_table_then_its_warnings_once(tmp_path: Path) -> None:
    rows = [{"step": 0, M.VAL_ACCURACY: 0.25}, {"step": 8, M.VAL_ACCURACY: 0.5}, {"step": 9, M.LOSS: "nan"}]
    write_csv(tmp_path / "metrics.csv", rows)
    result = {
        "accuracy_before": 0.25,
        "accuracy_after": 0.5,
        "steps": 8,
        "rollouts": 2,
        "wall_time_s": 12.3,
        "output_dir": str(tmp_path),
        "metrics_csv": str(tmp_path / "metrics.csv"),
        "checkpoint": None,
        "summary": summarize_run(tmp_path / "metrics.csv", {}, 12.3, loggers=[]),
    }
    out = io.StringIO()
    print_run_summary(result, "GRPOLoss()", [], smoke_run=True, console=Console(file=out, width=80))
    text = out.getvalue()
    assert text.count("twinkle_exp run") == 1 and text.count("⚠ non-finite values") == 1
    assert "25.0% (warm-start) -> 50.0% (+25.0%)" in text and "a smoke run" in text
    assert text.index("metrics (CSV)") < text.index("⚠ non-finite values")  # the table, then the warnings


@dataclass
class Optim:
    mu: int = 2


@dataclass
class Cfg:
    optim: Optim = field(default_factory=Optim)


def test_plain_config_from_every_kind() -> None:
    expected = {"optim": {"mu": 2}}
    assert plain_config(Cfg()) == expected
    assert plain_config(OmegaConf.structured(Cfg)) == expected
    assert plain_config(expected) == expected
    assert plain_config(None) == {}


@pytest.mark.slow
def test_a_run_writes_its_summary_and_prints_its_warnings(run_cli, tmp_path: Path) -> None:
    """End to end: run.json's final figures, the wandb run summary and the warning on the terminal."""
    from wandb.proto import wandb_internal_pb2 as pb
    from wandb_records import raw_records

    proc = run_cli("debug=fast", "optim.mu=1", "optim.num_minibatches=1", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "⚠ strictly on-policy updates: optim.mu = 1, optim.num_minibatches = 1" in " ".join(
        proc.stdout.split()
    )
    [run_json] = tmp_path.glob("outputs/*/*/run.json")
    summary = json.loads(run_json.read_text())["final"]["summary"]
    assert "on_policy" in summary[M.SUMMARY_WARNINGS]
    assert summary[M.SUMMARY_THRESHOLD] == 0.5 and summary[M.SUMMARY_WALL_TIME] > 0

    [log] = run_json.parent.glob("wandb/offline-run-*/run-*.wandb")
    in_wandb = {}
    for payload in raw_records(log):
        record = pb.Record()
        record.ParseFromString(payload)
        if record.WhichOneof("record_type") == "summary":
            for item in record.summary.update:
                in_wandb[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    assert in_wandb[M.SUMMARY_FINAL_ACCURACY] == summary[M.SUMMARY_FINAL_ACCURACY]
    assert in_wandb[M.SUMMARY_ACCURACY_AUC] == pytest.approx(summary[M.SUMMARY_ACCURACY_AUC])
    assert in_wandb[M.SUMMARY_WARNINGS] == summary[M.SUMMARY_WARNINGS]
