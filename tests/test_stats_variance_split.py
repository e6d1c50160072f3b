"""The variance split between warm-starts and within (report/statistics/variance_split.py): the ANOVA
formulas on a hand-computed table, unbiased components on synthetic runs with known ones, the F test's
level, unbalanced designs, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from twinkle_exp.report.statistics.variance_split import variance_split


def test_the_components_of_a_small_table_written_out():
    table = {0: [1.0, 2.0, 3.0], 1: [4.0, 5.0, 6.0]}  # means 2 and 5, grand mean 3.5
    ms_between = 3 * ((2 - 3.5) ** 2 + (5 - 3.5) ** 2) / 1  # 13.5
    ms_within = (1 + 0 + 1 + 1 + 0 + 1) / 4  # 1.0
    got = variance_split(table)
    assert got.within == pytest.approx(ms_within) and got.between == pytest.approx(
        (ms_between - ms_within) / 3
    )
    assert got.share_between == pytest.approx(got.between / (got.between + got.within))
    assert got.f == pytest.approx(13.5) and got.p_value == pytest.approx(stats.f.sf(13.5, 1, 4))
    assert (got.warm_starts, got.runs) == (2, 6)


def test_known_components_are_recovered_on_average():
    rng = np.random.default_rng(0)
    sd_between, sd_within, k, n = 0.05, 0.02, 5, 10  # 5 warm-starts x 10 RL seeds, as a sweep would have
    splits = []
    for _ in range(2000):
        effects = rng.normal(0, sd_between, k)
        splits.append(variance_split({w: 0.6 + effects[w] + rng.normal(0, sd_within, n) for w in range(k)}))
    within = np.mean([s.within for s in splits])
    between = np.mean([s.between for s in splits])
    assert within == pytest.approx(sd_within**2, rel=0.02)
    assert between == pytest.approx(sd_between**2, rel=0.05)  # truncation at 0 is rare at this ratio
    assert np.median([s.share_between for s in splits]) == pytest.approx(0.0025 / 0.0029, abs=0.05)


def test_no_warm_start_effect_gives_an_f_test_at_its_level():
    rng = np.random.default_rng(1)
    p = [variance_split({w: rng.normal(0, 1, 4) for w in range(3)}).p_value for _ in range(4000)]
    assert np.mean(np.array(p) < 0.05) == pytest.approx(0.05, abs=0.012)


def test_an_unbalanced_design_uses_n0():
    table = {0: [1.0, 3.0], 1: [2.0, 4.0, 6.0], 2: [10.0, 11.0, 12.0, 13.0]}
    sizes, total, k = np.array([2, 3, 4]), 9, 3
    values = np.concatenate([np.array(v) for v in table.values()])
    means = np.array([2.0, 4.0, 11.5])
    ms_between = np.sum(sizes * (means - values.mean()) ** 2) / (k - 1)
    ms_within = (2 + 8 + 5) / (total - k)
    n0 = (total - np.sum(sizes**2) / total) / (k - 1)
    got = variance_split(table)
    assert got.between == pytest.approx((ms_between - ms_within) / n0) and got.within == pytest.approx(
        ms_within
    )


def test_a_negative_estimate_is_zero_and_bad_tables_are_refused():
    assert variance_split({0: [0.0, 1.0], 1: [0.0, 1.0]}).between == 0.0
    with pytest.raises(ValueError, match="at least 2 warm-starts"):
        variance_split({0: [1.0, 2.0]})
    with pytest.raises(ValueError, match="more runs than warm-starts"):
        variance_split({0: [1.0], 1: [2.0]})
    with pytest.raises(ValueError, match="finite"):
        variance_split({0: [1.0, float("nan")], 1: [2.0, 3.0]})


# --- in the report: sweeps that vary warmup.seed --------------------------------------------------------------
def _write_job(sweep, loss: str, warm: int, seed: int, final: float) -> None:
    import json

    job = sweep / f"{loss}_w{warm}_s{seed}"
    (job / ".hydra").mkdir(parents=True)
    overrides = [f"loss={loss}", f"warmup.seed={warm}", f"seed={seed}"]
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    info = {"status": "finished", "overrides": overrides, "seed": seed, "wall_time_s": 1.0}
    (job / "run.json").write_text(json.dumps(info))
    (job / "metrics.csv").write_text(f"step,val/accuracy\n0,0.3\n10,{final}\n")


def test_the_report_splits_the_spread_of_runs_crossed_over_warm_starts(tmp_path):
    from twinkle_exp.report.__main__ import main
    from twinkle_exp.report.loading.runs import load_runs
    from twinkle_exp.report.statistics.warm_starts import pooled_label, split_sentences, splits

    rng = np.random.default_rng(3)
    finals = {}
    for loss, sd_between in (("grpo", 0.08), ("cispo", 0.0)):
        effects = rng.normal(0, sd_between, 3)
        for w in range(3):
            for s in range(4):
                finals[loss, w, s] = float(np.clip(0.6 + effects[w] + rng.normal(0, 0.02), 0, 1))
                _write_job(tmp_path, loss, w, s, finals[loss, w, s])
    runs = load_runs([tmp_path])
    assert {pooled_label(r) for r in runs} == {"loss=grpo", "loss=cispo"}
    got = splits(runs)
    expected = variance_split({w: [finals["grpo", w, s] for s in range(4)] for w in range(3)})
    assert got["loss=grpo"]["final accuracy"] == expected
    assert (
        got["loss=grpo"]["final accuracy"].share_between
        > 0.8
        > got["loss=cispo"]["final accuracy"].share_between
    )
    # The AUC of a two-point curve is its mean: (0.3 + final) / 2, a quarter of the final's variance.
    auc = got["loss=grpo"]["AUC"]
    assert auc.between == pytest.approx(expected.between / 4) and auc.within == pytest.approx(
        expected.within / 4
    )
    assert main([str(tmp_path)]) == 0
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Warm-starts" in report
    assert all(line in report for line in split_sentences(runs)) and len(split_sentences(runs)) == 4


def test_a_sweep_of_one_warm_start_shows_no_split(tmp_path):
    from twinkle_exp.report.loading.runs import load_runs
    from twinkle_exp.report.statistics.warm_starts import split_sentences

    for s in range(3):
        _write_job(tmp_path, "grpo", 0, s, 0.5 + 0.01 * s)
    assert split_sentences(load_runs([tmp_path])) == []
