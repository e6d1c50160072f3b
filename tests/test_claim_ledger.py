"""The claim ledger (issue 31, item 2): every claim's sweep file pre-registers it, every declared precondition
is measured on the runs (fires on runs built to lack it, silent on runs built to have it), and a claim whose
precondition is absent is refused its verdict and left untested; the new claims' statistics on hand-built runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from report_helpers import finished_run as run

from twinkle_exp import metric_names as M
from twinkle_exp.report.findings.__main__ import main as findings_main
from twinkle_exp.report.findings.claims import (
    CLAIMS,
    PASS_AT_1,
    PASS_AT_K,
    entropy_law_ceiling,
    length_contrast,
    mean_pass_curve,
)
from twinkle_exp.report.findings.verdict import decide, measure
from twinkle_exp.report.loading.runs import Run

SWEEP_DIR = Path(__file__).resolve().parents[1] / "conf" / "sweep"
REGISTERED = sorted(name for name, c in CLAIMS.items() if c.sweep)
HEADER_FIELDS = ("claim", "source", "statistic", "direction", "precondition", "tuning seeds", "verdict seeds")


def _header(name: str) -> str:
    lines = (SWEEP_DIR / f"{name}.yaml").read_text().splitlines()
    return " ".join(re.sub(r"^#\s*", "", line) for line in lines if line.startswith("#"))


@pytest.mark.parametrize("name", REGISTERED)
def test_each_claim_s_sweep_file_states_it_before_its_verdict_run(name):
    claim = CLAIMS[name]
    header = _header(claim.sweep)
    for field in HEADER_FIELDS:
        assert f" {field}: " in f" {header}", f"{claim.sweep}: no '{field}:' line"
    assert f"--finding {name}" in header, "the header's findings command names the claim"
    for needs in claim.preconditions:  # the machine-checked precondition is the one the file states
        assert needs.key in header and f"{needs.threshold:g}" in header, (needs.key, needs.threshold)
    params = yaml.safe_load((SWEEP_DIR / f"{claim.sweep}.yaml").read_text())["hydra"]["sweeper"]["params"]
    seeds = tuple(int(s) for s in str(params["seed"]).split(","))
    assert seeds == claim.verdict_seeds and len(seeds) >= 10, "at least 10 verdict seeds per arm"
    assert not set(seeds) & set(claim.tuning_seeds), "a verdict seed was used to choose a setting"
    arms = {f"{key}={value}" for key, values in params.items() for value in str(values).split(",")}
    assert {claim.treatment, claim.control} <= arms, "both arms are swept by the file"


# What each reduction of a precondition gives on a step series whose first half is `a` and second half `b`.
def _series(reduce: str, value: float) -> list[tuple[int, float]]:
    a, b = {
        "first": (value, value),
        "last": (value, value),
        "run_mean": (value, value),
        "last_minus_first": (0.3, 0.3 + value),
        "quarter_change": (0.3, 0.3 + value),
        "quarter_ratio": (1.0, value),
    }[reduce]
    return [(10 * i, a if i < 4 else b) for i in range(8)]


PRECONDITIONS = [(name, i) for name in sorted(CLAIMS) for i in range(len(CLAIMS[name].preconditions))]


@pytest.mark.parametrize(("name", "index"), PRECONDITIONS)
def test_each_precondition_fires_and_stays_silent_on_runs_built_for_it(name, index):
    claim = CLAIMS[name]
    needs = claim.preconditions[index]
    delta = 0.5 * abs(needs.threshold) or 0.01
    good = needs.threshold + (delta if needs.at_least else -delta)
    bad = needs.threshold - (delta if needs.at_least else -delta)
    arms = (claim.treatment, claim.control) if needs.arm == "both" else (getattr(claim, needs.arm),)
    other = claim.control if needs.arm == "treatment" else claim.treatment

    def runs(value):
        built = [run(arm, s, {needs.key: _series(needs.reduce, value)}) for arm in arms for s in range(3)]
        # the other arm's runs must not count towards a one-arm precondition
        return built + [run(other, s, {needs.key: _series(needs.reduce, bad)}) for s in range(3)]

    assert measure(needs, claim, runs(good)).met
    fired = measure(needs, claim, runs(bad))
    assert not fired.met and fired.measured == pytest.approx(bad)
    assert not measure(needs, claim, []).met  # never logged: not met


def _spurious_runs(clip_off_policy: float) -> list[Run]:
    def arm(label, gain, clip):
        return [
            run(
                label,
                s,
                {
                    M.VAL_ACCURACY: [(0, 0.3), (60, 0.3 + gain / 2), (120, 0.3 + gain + 0.01 * s)],
                    M.CLIP_REGION: [(i, clip) for i in range(1, 121)],
                },
            )
            for s in range(10)
        ]

    return arm("+experiment=spurious_off_policy", 0.1, clip_off_policy) + arm(
        "+experiment=spurious_on_policy", 0.0, 0.0
    )


def test_a_claim_whose_precondition_is_absent_is_refused_its_verdict(tmp_path, capsys):
    claim = CLAIMS["spurious_reward_clip"]
    met = decide(claim, _spurious_runs(clip_off_policy=0.05))
    assert met.verdict == "different" and met.pair.p_raw < 0.05 and all(c.met for c in met.preconditions)
    absent = decide(claim, _spurious_runs(clip_off_policy=0.001))  # the clip does not bind off-policy
    assert absent.verdict == "precondition absent"
    assert absent.pair.p_raw is None and absent.pair.p_exact is None  # the statistic is not tested
    assert absent.pair.effect == pytest.approx(met.pair.effect)  # shown as a description only
    assert [c.met for c in absent.preconditions] == [False, True]
    assert absent.pair.precondition_measured == pytest.approx(0.001)


def write_run_dir(sweep: Path, r: Run) -> None:
    """A finished job as the trainer leaves it: its overrides, run.json and a metrics.csv of every series."""
    job = sweep / f"{len(list(sweep.glob('*'))) if sweep.exists() else 0}_job"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in r.overrides))
    info = {"status": "finished", "overrides": r.overrides, "seed": r.seed, "wall_time_s": 1.0}
    (job / "run.json").write_text(json.dumps(info))
    keys = sorted(r.metrics)
    columns = {k: dict(r.metrics[k]) for k in keys}
    steps = sorted({s for k in keys for s in columns[k]})
    rows = [",".join(["step", *keys])]
    rows += [
        ",".join([str(step), *(repr(float(columns[k][step])) if step in columns[k] else "" for k in keys)])
        for step in steps
    ]
    (job / "metrics.csv").write_text("\n".join(rows) + "\n")


def test_the_findings_page_says_which_precondition_is_absent(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for r in _spurious_runs(clip_off_policy=0.001):
        write_run_dir(sweep, r)
    assert findings_main([str(sweep), "--finding", "spurious_reward_clip"]) == 0
    assert capsys.readouterr().out.startswith("spurious_reward_clip: precondition absent")
    page = (sweep / "findings" / "findings.md").read_text()
    assert "**absent**" in page and "not tested: a precondition is absent" in page


def test_an_equality_claim_is_contradicted_by_a_difference_either_way():
    claim = CLAIMS["spurious_reward_null"]
    noise = np.random.default_rng(0).normal(0.0, 0.005, size=(2, 10))

    def runs(gain):
        on = [
            run(
                "+experiment=spurious_on_policy",
                s,
                {M.VAL_ACCURACY: [(0, 0.3), (120, 0.3 + gain + noise[0, s])], M.CLIP_REGION: [(1, 0.0)]},
            )
            for s in range(10)
        ]
        base = [
            run("+experiment=warm_start_only", s, {M.VAL_ACCURACY: [(0, 0.3 + noise[1, s])]})
            for s in range(10)
        ]
        return on + base

    assert decide(claim, runs(0.0)).verdict == "equivalent"  # within the 2-point margin
    assert decide(claim, runs(0.1)).verdict == "contradicted"
    assert decide(claim, runs(-0.1)).verdict == "contradicted"


def test_entropy_law_ceiling_recovers_the_coefficients():
    a, b = 0.4, 1.1  # R = -a exp(H) + b: at H = 0 the reward is b - a = 0.7
    entropy = [(s, 1.0 - 0.09 * s) for s in range(10)]
    reward = [(s, -a * np.exp(h) + b) for s, h in entropy]
    r = run("loss=grpo", 0, {M.ENTROPY: entropy, M.REWARD_MEAN: reward})
    assert entropy_law_ceiling(reward, r) == pytest.approx(b - a, abs=1e-9)


def test_length_contrast_cancels_a_drift_shared_by_right_and_wrong_answers():
    # both lengths drift +3 tokens, wrong ones 2 more: the contrast is 2
    correct = [(i, 10.0 if i < 4 else 13.0) for i in range(8)]
    incorrect = [(i, 10.0 if i < 4 else 15.0) for i in range(8)]
    r = run("loss=grpo", 0, {M.COMPLETION_LENGTH_CORRECT: correct, M.COMPLETION_LENGTH_INCORRECT: incorrect})
    assert length_contrast(incorrect, r) == pytest.approx(2.0)


def test_mean_pass_curve_averages_the_final_pass_at_k_over_k():
    metrics = {M.VAL_PASS_AT + str(k): [(0, 0.1), (100, k / 16)] for k in range(1, 17)}
    r = run("advantage=group", 0, metrics)
    assert mean_pass_curve(metrics[PASS_AT_1], r) == pytest.approx(np.mean([k / 16 for k in range(1, 17)]))
    assert PASS_AT_K in metrics


def test_a_pass_at_k_claim_is_decided_and_drawn_against_k(tmp_path, capsys):
    """rl_passk_small_k on runs built for it: the RL arm's pass@1 is 20 points above the warm-start's,
    its greedy accuracy rose 10 points (the precondition): "different", and the page shows pass@k against k."""
    sweep = tmp_path / "sweep"
    noise = np.random.default_rng(3).normal(0.0, 0.01, 10)
    for s in range(10):
        rl = {M.VAL_PASS_AT + str(k): [(0, 0.1 * k / 4), (200, 0.3 + 0.02 * k + noise[s])] for k in (1, 2, 4)}
        rl[M.VAL_ACCURACY] = [(0, 0.3), (200, 0.4)]
        base = {M.VAL_PASS_AT + str(k): [(0, 0.1 * k / 4 + noise[s] / 2)] for k in (1, 2, 4)}
        base[M.VAL_ACCURACY] = [(0, 0.3)]
        write_run_dir(sweep, run("trainer.max_steps=200", s, rl))
        write_run_dir(sweep, run("trainer.max_steps=0", s, base))
    assert findings_main([str(sweep), "--finding", "rl_passk_small_k"]) == 0
    assert capsys.readouterr().out.startswith("rl_passk_small_k: different")
    out = sweep / "findings"
    assert (out / "rl_passk_small_k_pass_at_k.png").is_file()
    page = (out / "findings.md").read_text()
    assert "rl_passk_small_k_pass_at_k.png" in page and "measured 0.1, met" in page
