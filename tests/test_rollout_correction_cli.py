"""`python -m twinkle_exp` with a rollout correction, a bf16 sampler and the entropy switches, end to end."""

from __future__ import annotations

import csv

import pytest

from twinkle_exp import metric_names as M
from twinkle_exp.loss import metric_keys as K


def _rows(run_dir) -> list[dict[str, float]]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [{k: float(v) for k, v in r.items() if v != ""} for r in csv.DictReader(f)]


def _first_step(rows: list[dict[str, float]]) -> dict[str, float]:
    return next(r for r in rows if M.TRAIN + K.RATIO_MEAN in r)


@pytest.mark.slow
def test_a_bf16_sampler_with_tis_trains_and_logs_the_correction(run_cli, tmp_path):
    proc = run_cli(
        "loss=grpo",
        "optim.rollout_correction.mode=tis",
        "rollout.sampler_dtype=bfloat16",
        "debug=fast",
        "logger=csv",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(tmp_path / "run")
    first = _first_step(rows)
    # The bf16 sampler's log-probs differ from the fp32 update's; the recompute puts the ratio back at 1
    # and the correction weighs the gap.
    assert first[M.LOGP_MISMATCH_MEAN] > 1e-4
    assert first[M.TRAIN + K.RATIO_MIN] == first[M.TRAIN + K.RATIO_MAX] == 1.0
    low, high = first[M.TRAIN + K.ROLLOUT_RATIO_MIN], first[M.TRAIN + K.ROLLOUT_RATIO_MAX]
    assert low < 1.0 < high and low <= first[M.TRAIN + K.ROLLOUT_RATIO_MEAN] <= high
    assert sum(M.TRAIN + K.ROLLOUT_RATIO_MEAN in r for r in rows) == 4  # every optimizer step


@pytest.mark.slow
@pytest.mark.parametrize("switch", ["loss.entropy_coef=0.01", "loss.top_entropy_quantile=0.2"])
def test_the_entropy_switches_train(run_cli, tmp_path, switch):
    proc = run_cli("loss=grpo", switch, "debug=fast", "logger=csv", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len([r for r in _rows(tmp_path / "run") if M.LOSS in r]) == 4


@pytest.mark.slow
def test_a_correction_with_the_sampler_s_old_logps_is_refused_in_one_line(run_cli, tmp_path):
    proc = run_cli("optim.rollout_correction.mode=mis", "optim.old_logps=sampler", "loss=gpg", "loss.delta=2")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    assert lines[0] == "twinkle_exp: 2 problem(s) in the config:", lines
    assert lines[1].startswith("optim.rollout_correction.mode=mis with optim.old_logps=sampler")
    assert lines[2] == "loss=gpg: delta applies to the PPO-clipped objective only, not gpg's", lines
