"""ScaleRL's sigmoid (report/statistics/sigmoid_fit.py): the formula, the fit recovering known parameters
from synthetic curves (exact and noisy), intervals over seeds that cover them, the first-half fit checked
on the second half, and the compute axes (samples, tokens) from logged steps."""

from __future__ import annotations

import numpy as np
import pytest

from twinkle_exp.report.loading.runs import Run
from twinkle_exp.report.statistics import sigmoid_fit as S

TRUE = {"R0": 0.1, "A": 0.8, "B": 1.5, "C_mid": 2000.0}
COMPUTE = np.arange(0, 101) * 128.0  # 100 rollouts of 128 samples, and the start


def _curve(noise: float = 0.0, seed: int = 0, **params) -> np.ndarray:
    p = TRUE | params
    c = COMPUTE
    clean = np.full(len(c), p["R0"])
    c_pos = c[c > 0]
    clean[c > 0] = p["R0"] + (p["A"] - p["R0"]) / (1 + (p["C_mid"] / c_pos) ** p["B"])
    return clean + np.random.default_rng(seed).normal(0, noise, len(c))


def test_the_formula_at_zero_at_the_midpoint_and_far_out():
    r0, a, b, c_mid = 0.1, 0.8, 1.5, 2000.0
    got = S.sigmoid([0.0, c_mid, 1e12, 500.0], r0, a, b, c_mid)
    expected_500 = r0 + (a - r0) / (1 + (c_mid / 500.0) ** b)
    assert got == pytest.approx([r0, (r0 + a) / 2, a, expected_500], abs=1e-12)


def test_the_fit_recovers_the_parameters_of_an_exact_curve():
    fit = S.fit_sigmoid(COMPUTE, _curve())
    assert TRUE["R0"] == fit.R0 and fit.n == len(COMPUTE)
    assert pytest.approx(TRUE["A"], rel=1e-4) == fit.A
    assert pytest.approx(TRUE["B"], rel=1e-3) == fit.B
    assert fit.C_mid == pytest.approx(TRUE["C_mid"], rel=1e-3)
    assert fit.rmse < 1e-6


@pytest.mark.parametrize(
    "params", [{"A": 0.5, "B": 0.7, "C_mid": 6000.0}, {"A": 0.95, "B": 4.0, "C_mid": 800.0}]
)
def test_other_shapes_and_a_fitted_r0(params):
    r = _curve(**params, R0=0.3)
    fit = S.fit_sigmoid(COMPUTE, r, fit_r0=True)
    assert pytest.approx(0.3, abs=1e-3) == fit.R0
    assert (fit.A, fit.B, fit.C_mid) == pytest.approx((params["A"], params["B"], params["C_mid"]), rel=1e-2)


def test_noisy_seeds_give_intervals_that_cover_the_true_parameters():
    fits = [S.fit_sigmoid(COMPUTE, _curve(noise=0.02, seed=s), r0=TRUE["R0"]) for s in range(10)]
    assert all(abs(f.A - TRUE["A"]) < 0.05 for f in fits)
    assert all(0.01 < f.rmse < 0.03 for f in fits)  # the noise's sd, 0.02
    intervals = S.intervals_over_seeds(fits)
    for name in ("A", "B", "C_mid"):
        i = intervals[name]
        assert i.low < TRUE[name] < i.high and i.n == 10, (name, i)
    assert intervals["C_mid"].method.endswith("of log C_mid")


def test_a_plateau_beyond_the_scores_is_reached_only_within_a_range():
    # The run stops before the plateau (C_mid at 3/4 of the compute): A is above every score seen.
    r = _curve(C_mid=9600.0, A=0.9)
    assert r.max() < 0.6
    assert pytest.approx(0.9, rel=1e-3) == S.fit_sigmoid(COMPUTE, r).A
    capped = S.fit_sigmoid(COMPUTE, r, a_range=(0.0, 0.7))
    assert pytest.approx(0.7) == capped.A and capped.rmse > 1e-3


def test_the_first_half_fit_is_checked_on_the_second_half():
    exact = S.extrapolation_check(COMPUTE, _curve())
    assert exact.held_out == len(COMPUTE) - len(COMPUTE) // 2 and exact.fit.n == len(COMPUTE) // 2
    assert exact.max_abs_error < 1e-4
    noisy = S.extrapolation_check(COMPUTE, _curve(noise=0.02, seed=3))
    # On held-out points the error is the noise's (mean |N(0, 0.02)| = 0.016) plus the fit's.
    assert 0.01 < noisy.mean_abs_error < 0.03
    half = len(COMPUTE) // 2
    expected = np.abs(noisy.fit.predict(COMPUTE[half:]) - _curve(noise=0.02, seed=3)[half:])
    assert noisy.mean_abs_error == pytest.approx(expected.mean()) and noisy.max_abs_error == pytest.approx(
        expected.max()
    )


def test_the_compute_axes_count_samples_and_tokens_drawn_by_each_step():
    # 4 optimizer steps per rollout of 16 x 8 samples; validation at steps 0, 4, 8, 10.
    assert S.samples_drawn([0, 4, 8, 10], 4, 128).tolist() == [0, 128, 256, 384]
    # Rollouts of mean length 5, 6, 7 tokens, each logged at the step that ends its updates.
    tokens = S.tokens_drawn([0, 4, 8, 10, 12], [4, 8, 12], [5.0, 6.0, 7.0], 128)
    assert tokens.tolist() == [0, 5 * 128, 11 * 128, 11 * 128, 18 * 128]


def test_bad_input_is_refused_by_name():
    with pytest.raises(ValueError, match="one length"):
        S.fit_sigmoid([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least 3 points"):
        S.fit_sigmoid([0, 1, 2], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="finite"):
        S.fit_sigmoid([1, 2, 3, 4], [0.1, float("nan"), 0.3, 0.4])
    with pytest.raises(ValueError, match="a_range"):
        S.fit_sigmoid(COMPUTE, _curve(), a_range=(1.0, 0.5))


# --- a sweep's variants (report/statistics/scaling_curves.py) ---------------------------------------------
def _run(name: str, seed: int, **params) -> Run:
    steps = np.arange(0, 101) * 4  # validation every rollout of 4 optimizer steps, 128 samples each
    accuracy = np.clip(_curve(noise=0.01, seed=seed, **params), 0, 1)
    lengths = [(int(s), 5.0) for s in steps[1:]]  # every completion 5 tokens
    config = {"rollout": {"prompts_per_step": 16, "group_size": 8}, "optim": {"mu": 2, "num_minibatches": 2}}
    metrics = {
        "val/accuracy": list(zip(steps.tolist(), accuracy.tolist(), strict=True)),
        "train/completions/mean_length": lengths,
    }
    return Run(path=None, name=f"{name}/{seed}", overrides=[name, f"seed={seed}"], status="finished", seed=seed,
               metrics=metrics, config=config)  # fmt: skip


def test_a_variants_runs_are_fitted_against_samples_and_tokens():
    from twinkle_exp.report.statistics import scaling_curves as SC

    c, r = SC.run_curve(_run("loss=grpo", 0), axis="samples")
    assert c[:3].tolist() == [0, 128, 256] and c[-1] == 100 * 128 and len(r) == 101
    tokens, _ = SC.run_curve(_run("loss=grpo", 0), axis="tokens")
    assert np.array_equal(tokens, c * 5)
    slow_high = SC.fit_variant([_run("loss=a", s, C_mid=4000.0, A=0.9) for s in range(5)])
    fast_low = SC.fit_variant([_run("loss=b", s, C_mid=800.0, A=0.6) for s in range(5)])
    assert slow_high.intervals["A"].low < 0.9 < slow_high.intervals["A"].high
    assert fast_low.intervals["C_mid"].low < 800 < fast_low.intervals["C_mid"].high
    assert fast_low.extrapolation_error.value < 0.02
    # b learns fast and stops low, a slower and higher: here both rankings put a first.
    assert SC.rankings_agree({"a": slow_high, "b": fast_low})
    slower = SC.fit_variant([_run("loss=c", s, C_mid=20000.0, A=0.95) for s in range(3)])
    assert (
        slower.auc.value < fast_low.auc.value and slower.intervals["A"].value > fast_low.intervals["A"].value
    )
    assert not SC.rankings_agree({"c": slower, "b": fast_low})  # the AUC ranks the slow, higher one last


def test_a_run_without_the_settings_the_axis_needs_is_named():
    from twinkle_exp.report.statistics import scaling_curves as SC

    run = _run("loss=grpo", 0)
    run.config = {}
    with pytest.raises(
        ValueError, match="loss=grpo/0: its .hydra/config.yaml has no rollout.prompts_per_step"
    ):
        SC.run_curve(run)
    with pytest.raises(ValueError, match="axis must be one of"):
        SC.run_curve(_run("loss=grpo", 0), axis="flops")
