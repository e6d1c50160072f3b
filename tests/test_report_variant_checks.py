"""The cross-variant checks (ceiling, scalar normaliser), steps to threshold and the findings' verdicts, each on synthetic runs built for it, and silent on a default-like sweep (issue 20, items 3 and 5)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from report_helpers import finished_run

from twinkle_exp import metric_names as M
from twinkle_exp.report.diagnostics.variants import ceiling, scalar_normaliser
from twinkle_exp.report.findings.claims import CLAIMS
from twinkle_exp.report.findings.verdict import decide
from twinkle_exp.report.loading.runs import Run
from twinkle_exp.report.statistics.aggregate import DEFAULT_SCORES, summarize

VAL_STEPS = list(range(0, 401, 40))
CONFIG = {
    "optim": {"mu": 2, "num_minibatches": 2, "lr": 1e-4},
    "rollout": {"max_new_tokens": 8},
    "advantage": {"scale": "group", "eps": 1e-6},
    "loss": {
        "_target_": "twinkle_exp.loss.GRPOLoss",
        "clip_range": 0.2,
        "clip_range_high": None,
        "beta": 0.01,
    },
    "seed": 0,
}


def run(label: str, seed: int, metrics: dict, config: dict | None = None) -> Run:
    return finished_run(label, seed, metrics, config or CONFIG)


def accuracy_runs(label: str, final: float, by_length: dict[int, float], seeds=(0, 1, 2)) -> list[Run]:
    out = []
    for seed in seeds:
        curve = [(s, 0.4 + (final - 0.4) * s / 400) for s in VAL_STEPS]
        metrics = {M.VAL_ACCURACY: curve}
        for length, level in by_length.items():
            metrics[M.VAL_ACCURACY_BY_LENGTH + str(length)] = [(s, level) for s in VAL_STEPS]
        out.append(run(label, seed, metrics))
    return out


def test_ceiling_fires_where_every_loss_stops_at_a_length_none_learns():
    # issue 20's default sweep: 76.6 / 77.3 / 77.3%, answers of length 5 at 0% for every loss
    stuck = {3: 1.0, 4: 0.97, 5: 0.0, 6: 1.0}
    variants = {
        "loss=grpo": accuracy_runs("loss=grpo", 0.766, stuck),
        "loss=bnpo": accuracy_runs("loss=bnpo", 0.773, stuck),
        "loss=drgrpo": accuracy_runs("loss=drgrpo", 0.773, stuck),
    }
    result = ceiling(variants)
    assert set(result.variants) == set(variants)
    evidence = result.variants["loss=grpo"][0].evidence
    assert "76.6%..77.3% over 3 variants" in evidence and "answers of length 5: 0% at most" in evidence
    assert "AUC" in result.advice


def test_ceiling_fires_when_every_variant_saturates():
    full = {3: 1.0, 4: 1.0}
    variants = {v: accuracy_runs(v, 0.98, full) for v in ("loss=grpo", "loss=sapo")}
    assert "every variant at or above 95%" in ceiling(variants).variants["loss=sapo"][0].evidence


def test_ceiling_is_silent_when_variants_end_apart_or_below_a_learnable_level():
    apart = {
        "loss=grpo": accuracy_runs("loss=grpo", 0.70, {5: 0.0}),
        "loss=sapo": accuracy_runs("loss=sapo", 0.80, {5: 0.0}),
    }
    assert not ceiling(apart).variants
    # close together, but every answer length still partly learned: a plateau the losses share, not a limit
    learnable = {
        v: accuracy_runs(v, 0.81, {3: 1.0, 4: 1.0, 5: 0.26, 6: 0.95}) for v in ("loss=grpo", "loss=bnpo")
    }
    assert not ceiling(learnable).variants


def _with_loss(name: str, scale: str = "group", **loss) -> dict:
    config = copy.deepcopy(CONFIG)
    config["loss"].update({"_target_": f"twinkle_exp.loss.{name}"}, **loss)
    config["advantage"]["scale"] = scale
    return config


def _variants(**configs) -> dict[str, list[Run]]:
    return {label: [run(label, 0, {}, config)] for label, config in configs.items()}


def test_scalar_normaliser_names_bnpo_and_drgrpo_under_the_same_advantages():
    variants = _variants(
        bnpo=_with_loss("BNPOLoss"),
        drgrpo=_with_loss("DRGRPOLoss", max_completion_length=8),
        grpo=_with_loss("GRPOLoss"),
    )
    result = scalar_normaliser(variants)
    assert set(result.variants) == {"bnpo", "drgrpo"}
    assert "advantage=unscaled" in result.advice
    # a batch-wide std is one number per step too: unscaled against batch-scaled is still a scalar apart
    batch = _variants(bnpo=_with_loss("BNPOLoss", "batch"), drgrpo=_with_loss("DRGRPOLoss", "none"))
    assert set(scalar_normaliser(batch).variants) == {"bnpo", "drgrpo"}


@pytest.mark.parametrize(
    "other",
    [
        _with_loss(
            "DRGRPOLoss", "none", max_completion_length=8
        ),  # the paper's Dr.GRPO: per-group scale differs
        _with_loss("DRGRPOLoss", clip_range=0.3),  # a different clip: a different objective
        _with_loss("GRPOLoss"),  # a per-sequence normaliser: not a scalar
    ],
)
def test_scalar_normaliser_is_silent_when_the_objectives_differ(other):
    assert not scalar_normaliser(_variants(bnpo=_with_loss("BNPOLoss"), other=other)).variants


def test_steps_to_threshold_restricted_mean():
    def reaching(label, steps):
        return [
            run(label, i, {M.VAL_ACCURACY: [(0, 0.3), (s, 0.6), (400, 0.7)]}) for i, s in enumerate(steps)
        ]

    runs = reaching("loss=cispo", [80, 100, 120]) + reaching("loss=bnpo", [160, 200, 240])
    stats = {s.label: s.threshold for s in summarize(runs, 0.5, DEFAULT_SCORES)}
    # Every run reached it, all followed to step 400: the restricted mean is the plain mean, t interval.
    assert stats["loss=cispo"].value == pytest.approx(100.0) and stats["loss=bnpo"].value == pytest.approx(
        200.0
    )
    assert stats["loss=cispo"].reached == 3 and stats["loss=cispo"].horizon == 400
    assert stats["loss=cispo"].low == pytest.approx(100 - 4.303 * 20 / np.sqrt(3), abs=0.01)


def test_auc_is_the_headline_score():
    assert DEFAULT_SCORES[0].name == "AUC"


def _length_runs(label: str, growth: float, seeds=range(5), noise: float = 0.3) -> list[Run]:
    out = []
    for seed in seeds:
        rng = np.random.default_rng(seed + (100 if "drgrpo" in label else 0))
        values = 10 + growth * np.linspace(0, 1, 40) + rng.normal(0, noise, 40)
        out.append(
            run(
                label,
                seed,
                {M.COMPLETION_LENGTH_INCORRECT: [(4 * i, float(v)) for i, v in enumerate(values)]},
            )
        )
    return out


def test_finding_different_when_grpo_wrong_answers_grow_and_drgrpo_ones_do_not():
    v = decide(CLAIMS["drgrpo_length"], _length_runs("loss=grpo", 4.0) + _length_runs("loss=drgrpo", 0.0))
    assert v.verdict == "different" and v.pair.p_raw < 0.05  # in the paper's direction
    assert 2.5 < v.pair.effect < 4.5 and v.pair.low > 0 and v.pair.family_size == 1
    assert len(v.treatment) == len(v.control) == 5


def test_finding_contradicted_and_inconclusive():
    other = decide(
        CLAIMS["drgrpo_length"], _length_runs("loss=grpo", -4.0) + _length_runs("loss=drgrpo", 0.0)
    )
    assert other.verdict == "contradicted"
    null = decide(CLAIMS["drgrpo_length"], _length_runs("loss=grpo", 0.0) + _length_runs("loss=drgrpo", 0.0))
    assert null.verdict == "inconclusive" and null.pair.p_raw > 0.05 and null.pair.mde > 0


def test_ratio_finding_and_censored_steps():
    def clip_runs(label, level):
        return [
            run(label, s, {M.CLIP_REGION: [(i, level * (1 + 0.1 * s)) for i in range(10)]}) for s in range(5)
        ]

    v = decide(
        CLAIMS["gspo_clipping"],
        clip_runs("+experiment=gspo_paper", 0.15) + clip_runs("+experiment=grpo_gspo_baseline", 0.0015),
    )
    assert v.verdict == "different" and v.ratio == pytest.approx(100.0)


def test_steps_to_the_control_arms_level_with_censoring():
    def acc_runs(label, reach_at, final, seeds=range(5)):
        curve = lambda s: [(0, 0.4), (reach_at + s, final), (160, final)]  # noqa: E731
        return [run(label, s, {M.VAL_ACCURACY: curve(s), **CLIPS_OFTEN}) for s in seeds]

    # DAPO (the baseline, the ratio's numerator) ends at 0.8 after reaching it at ~100; CISPO gets to 0.85 at
    # ~50: threshold
    # 0.4 + 0.9 (0.8 - 0.4) = 0.76
    runs = acc_runs("loss=cispo", 50, 0.85) + acc_runs("loss=bnpo", 100, 0.8)
    v = decide(CLAIMS["cispo_speed"], runs)
    assert v.threshold == pytest.approx(0.76)
    assert v.treatment == [100.0, 101.0, 102.0, 103.0, 104.0] and v.control == [50.0, 51.0, 52.0, 53.0, 54.0]
    assert v.ratio == pytest.approx(102 / 52) and v.verdict == "different"
    # a run that never reaches the threshold counts as the horizon (the earliest last step: 160), as in the report
    slow = (
        acc_runs("loss=cispo", 50, 0.85)
        + acc_runs("loss=bnpo", 100, 0.8)[:4]
        + [run("loss=bnpo", 9, {M.VAL_ACCURACY: [(0, 0.4), (160, 0.5)], **CLIPS_OFTEN})]
    )
    assert 160.0 in decide(CLAIMS["cispo_speed"], slow).treatment


def test_a_finding_without_runs_of_an_arm_says_which():
    with pytest.raises(ValueError, match="no finished run of loss=drgrpo"):
        decide(CLAIMS["drgrpo_length"], _length_runs("loss=grpo", 4.0))


CLIPS_OFTEN = {
    M.CLIP_REGION: [(0, 0.1), (160, 0.1)]
}  # cispo_speed's precondition: DAPO clips >= 5% of tokens


def test_cispo_speed_is_refused_where_the_clip_binds_on_few_tokens():
    def arm(label, reach_at, clip):
        return [
            run(label, s, {M.VAL_ACCURACY: [(0, 0.4), (reach_at + s, 0.8), (160, 0.8)], M.CLIP_REGION: clip})
            for s in range(5)
        ]

    fast = arm("loss=cispo", 50, [(0, 0.02), (160, 0.02)])
    rare = decide(CLAIMS["cispo_speed"], arm("loss=bnpo", 100, [(0, 0.02), (160, 0.02)]) + fast)
    assert rare.verdict == "precondition absent" and rare.pair.p_raw is None  # not tested
    often = decide(CLAIMS["cispo_speed"], arm("loss=bnpo", 100, [(0, 0.08), (160, 0.08)]) + fast)
    assert often.verdict == "different"


def test_dapo_entropy_is_refused_where_the_up_clipped_tokens_are_not_low_probability():
    def arm(label, final, low_prob):
        return [
            run(
                label,
                s,
                {
                    M.ENTROPY: [(i, 1.0 - (1 - final) * i / 39 + 0.01 * s) for i in range(40)],
                    M.LOW_PROB_GIVEN_HIGH: [(0, low_prob), (39, low_prob)],
                },
            )
            for s in range(5)
        ]

    absent = decide(
        CLAIMS["dapo_entropy"],
        arm("loss.clip_range_high=0.28", 0.8, 0.5) + arm("loss.clip_range_high=0.2", 0.3, 0.08),
    )
    assert absent.verdict == "precondition absent" and absent.pair.p_raw is None  # not tested
    held = decide(
        CLAIMS["dapo_entropy"],
        arm("loss.clip_range_high=0.28", 0.8, 0.7) + arm("loss.clip_range_high=0.2", 0.3, 0.7),
    )
    assert held.verdict == "different" and held.ratio > 1


def test_steps_to_threshold_is_not_testable_when_the_baseline_does_not_improve():
    runs = [run("loss=bnpo", s, {M.VAL_ACCURACY: [(0, 0.36), (160, 0.30)], **CLIPS_OFTEN}) for s in range(5)]
    runs += [run("loss=cispo", s, {M.VAL_ACCURACY: [(0, 0.36), (160, 0.33)]}) for s in range(5)]
    v = decide(CLAIMS["cispo_speed"], runs)
    assert (
        v.verdict.startswith("not testable: the baseline's final val/accuracy is not above")
        and v.pair is None
    )
