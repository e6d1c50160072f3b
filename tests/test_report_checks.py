"""Each check fires on a synthetic run built to trigger it, and stays silent on a default-like run.

The default-like run mimics what `python -m twinkle_exp` measured (seed 0..2, 400 steps, logged every 4 steps):
grad norm median 1.05-1.12 with 54-64% of steps above max_grad_norm = 1, entropy 0.74 -> ~0.26, KL rising to
0.2-0.25 with peaks at 0.6, at most 81% of groups with identical rewards, clip fraction median 0.6%.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from twinkle_exp import metric_names as M
from twinkle_exp.report.diagnostics.sweep import diagnose_sweep, identical_variants
from twinkle_exp.report.loading.runs import Run
from twinkle_exp.summary.diagnostics.per_run import DIAGNOSTICS, diagnose_run

STEPS = list(range(4, 401, 4))
DEFAULT_CONFIG = {
    "optim": {"mu": 2, "num_minibatches": 2, "max_grad_norm": 1.0, "lr": 1e-4},
    "rollout": {"group_size": 8},
    "loss": {"beta": 0.01},
}


def series(values) -> list[tuple[int, float]]:
    return list(zip(STEPS, (float(v) for v in values), strict=True))


def default_like(seed: int = 0) -> dict[str, list[tuple[int, float]]]:
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, len(STEPS))
    return {
        M.GRAD_NORM: series(rng.lognormal(np.log(1.08), 0.3, len(STEPS))),
        M.ENTROPY: series(0.74 - 0.48 * t + rng.normal(0, 0.02, len(STEPS))),
        M.KL: series(np.abs(0.01 + 0.22 * t + rng.normal(0, 0.05, len(STEPS)))),
        M.FRAC_REWARD_ZERO_STD: series(np.clip(rng.normal(0.4, 0.12, len(STEPS)), 0, 0.81)),
        M.CLIP_REGION: series(np.abs(rng.normal(0.006, 0.004, len(STEPS)))),
        M.RATIO_MIN: series(rng.uniform(0.25, 0.75, len(STEPS))),
        M.RATIO_MAX: series(rng.uniform(1.15, 2.0, len(STEPS))),
        M.REWARD_MEAN: series(0.2 + 0.5 * t + rng.normal(0, 0.03, len(STEPS))),
        M.VAL_ACCURACY: [(s, 0.39 + 0.38 * s / 400) for s in range(0, 401, 40)],
        # the built-in sampler against the trainer's forward: float rounding (the default run: 2.0e-7)
        M.LOGP_MISMATCH_MEAN: series(rng.uniform(1.5e-7, 2.5e-7, len(STEPS))),
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_default_like_run_passes_every_check(seed: int) -> None:
    assert diagnose_run(default_like(seed), {}, DEFAULT_CONFIG) == []


def fired(metrics, config=DEFAULT_CONFIG, nonfinite=None) -> dict:
    return {f.diagnostic: f for f in diagnose_run(metrics, nonfinite or {}, config)}


def test_on_policy_from_the_config_and_from_flat_ratios() -> None:
    metrics = default_like()
    metrics[M.RATIO_MIN] = series(np.full(len(STEPS), 1 - 1e-6))
    metrics[M.RATIO_MAX] = series(np.full(len(STEPS), 1 + 1e-6))
    on_policy_config = copy.deepcopy(DEFAULT_CONFIG)
    on_policy_config["optim"].update(mu=1, num_minibatches=1)
    finding = fired(metrics, on_policy_config)["on_policy"]
    assert "optim.mu = 1, optim.num_minibatches = 1" in finding.evidence
    assert "train/ratio/min and train/ratio/max within 0.001 of 1 at all 100 logged steps" in finding.evidence
    assert "optim.mu >= 2" in finding.advice
    assert "on_policy" in fired(metrics)  # the ratios alone are evidence (a config that was not saved)
    assert "on_policy" in fired(default_like(), on_policy_config)  # and the config alone
    assert "on_policy" not in fired(default_like())


def test_grad_clip_on_every_step() -> None:
    metrics = default_like()
    metrics[M.GRAD_NORM] = series(np.linspace(2.0, 3.0, len(STEPS)))
    finding = fired(metrics)["grad_clip_every_step"]
    assert finding.evidence.startswith("train/grad_norm > optim.max_grad_norm = 1 at 100 of 100 logged steps")
    assert "median 2.5" in finding.evidence and "optim.max_grad_norm" in finding.advice
    roomy = copy.deepcopy(DEFAULT_CONFIG)
    roomy["optim"]["max_grad_norm"] = 5.0
    assert "grad_clip_every_step" not in fired(metrics, roomy)


def test_zero_std_groups() -> None:
    metrics = default_like()
    metrics[M.FRAC_REWARD_ZERO_STD] = series(np.r_[np.full(30, 0.5), np.full(70, 0.95)])
    finding = fired(metrics)["zero_std_groups"]
    assert (
        "train/frac_reward_zero_std >= 0.9 at 70 of 100 logged steps (first at step 124" in finding.evidence
    )
    assert "rollout.group_size" in finding.advice and "8 completions" in finding.advice


def test_entropy_collapse() -> None:
    metrics = default_like()
    metrics[M.ENTROPY] = series(0.74 * np.exp(-np.linspace(0, 6, len(STEPS))))
    finding = fired(metrics)["entropy_collapse"]
    assert finding.evidence.startswith("train/entropy fell from 0.74 (step 4)")
    assert "loss.clip_range_high" in finding.advice


@pytest.mark.parametrize("key", [M.CLIP_REGION, M.CISPO_CLIP])
def test_high_clip_fraction(key: str) -> None:
    metrics = default_like()
    metrics[key] = series(np.linspace(0.1, 0.3, len(STEPS)))
    finding = fired(metrics)["high_clip_fraction"]
    assert (
        finding.evidence.startswith(f"{key}: median 20.0% of tokens")
        and "max 30.0% at step 400" in finding.evidence
    )
    assert "optim.mu" in finding.advice


def test_growing_kl() -> None:
    metrics = default_like()
    metrics[M.KL] = series(np.linspace(0.0, 3.0, len(STEPS)) ** 2)
    metrics[M.VAL_ACCURACY] = [(s, 0.6) for s in range(0, 401, 40)]  # flat: the KL buys nothing
    finding = fired(metrics)["growing_kl"]
    assert finding.evidence.startswith("train/kl: mean ") and "loss.beta (now 0.01)" in finding.advice
    assert finding.evidence.endswith("while val/accuracy went from 60.0% to 60.0%")
    del metrics[M.VAL_ACCURACY]  # no held-out accuracy logged: the KL alone decides
    assert "val/accuracy" not in fired(metrics)["growing_kl"].evidence
    metrics[M.KL] = series(np.full(len(STEPS), 0.8))  # high but flat: not growing
    assert "growing_kl" not in fired(metrics)


def test_growing_kl_that_buys_accuracy_is_learning() -> None:
    """The default benchmark's shape: KL to a weak warm-start grows 6x while held-out accuracy climbs."""
    metrics = default_like()
    metrics[M.KL] = series(np.linspace(0.0, 3.0, len(STEPS)) ** 2)
    metrics[M.VAL_ACCURACY] = [(s, 0.26 + 0.6 * s / 400) for s in range(0, 401, 40)]
    assert "growing_kl" not in fired(metrics)
    # A gain just under KL_PAID_GAIN between the two spans is not enough.
    metrics[M.VAL_ACCURACY] = [(s, 0.5 + 0.06 * s / 400) for s in range(0, 401, 40)]
    assert "growing_kl" in fired(metrics)


def test_nonfinite_values() -> None:
    finding = fired(default_like(), nonfinite={M.LOSS: [120, 124], M.GRAD_NORM: [124]})["nonfinite"]
    assert finding.evidence == "NaN or inf from step 120: train/grad_norm (1 steps), train/loss (2 steps)"


def test_truncated_reward_rise() -> None:
    """The issue's hack: val reward 0.21 -> 1.00 while every completion ran to the 12-token budget."""
    metrics = default_like()
    t = np.linspace(0, 1, len(STEPS))
    metrics[M.COMPLETION_CLIPPED_RATIO] = series(np.where(t < 0.1, 0.4, 0.95))
    config = {**DEFAULT_CONFIG, "rollout": {"group_size": 8, "max_new_tokens": 12}}
    finding = fired(metrics, config)["truncated_reward_rise"]
    assert finding.evidence.startswith(
        f"{M.COMPLETION_CLIPPED_RATIO} > 0.5 at 90 of 100 logged steps (44-400)"
    )
    assert "rollout.max_new_tokens = 12" in finding.advice
    # Completions that end by themselves, or a reward that does not rise: nothing to flag.
    metrics[M.COMPLETION_CLIPPED_RATIO] = series(np.full(len(STEPS), 0.1))
    assert "truncated_reward_rise" not in fired(metrics, config)
    metrics[M.COMPLETION_CLIPPED_RATIO] = series(np.full(len(STEPS), 0.95))
    metrics[M.REWARD_MEAN] = series(np.full(len(STEPS), 0.3))
    assert "truncated_reward_rise" not in fired(metrics, config)


def test_repeated_prompt_reward_rise() -> None:
    """The reward rises while most completions restate their prompt (the completions end by themselves)."""
    metrics = default_like()
    t = np.linspace(0, 1, len(STEPS))
    metrics[M.COMPLETION_CLIPPED_RATIO] = series(np.full(len(STEPS), 0.1))
    metrics[M.COMPLETION_REPEATS_PROMPT_RATIO] = series(np.where(t < 0.3, 0.2, 0.8))
    found = fired(metrics)
    assert "truncated_reward_rise" not in found
    assert found["repeated_prompt_reward_rise"].evidence.startswith(
        f"{M.COMPLETION_REPEATS_PROMPT_RATIO} > 0.5 at 70 of 100 logged steps (124-400) while {M.REWARD_MEAN} "
        "rose from"
    )
    assert "reward=math" in found["repeated_prompt_reward_rise"].advice
    # Completions that do not repeat, a reward that does not rise, or a run without the metric: silent.
    metrics[M.COMPLETION_REPEATS_PROMPT_RATIO] = series(np.full(len(STEPS), 0.5))
    assert "repeated_prompt_reward_rise" not in fired(metrics)
    metrics[M.COMPLETION_REPEATS_PROMPT_RATIO] = series(np.full(len(STEPS), 0.9))
    metrics[M.REWARD_MEAN] = series(np.full(len(STEPS), 0.3))
    assert "repeated_prompt_reward_rise" not in fired(metrics)
    assert "repeated_prompt_reward_rise" not in fired(default_like())


def test_sampler_mismatch_without_a_rollout_correction() -> None:
    metrics = default_like()
    metrics[M.LOGP_MISMATCH_MEAN] = series(np.full(len(STEPS), 8e-4))  # a bfloat16 sampler's gap
    metrics[M.LOGP_MISMATCH_MAX] = series(np.full(len(STEPS), 2e-2))
    finding = fired(metrics)["sampler_mismatch"]
    assert finding.evidence == (
        "train/logp_mismatch/mean: mean 0.0008 nats per token over 100 logged steps, max 0.02, "
        "with no rollout correction"
    )
    assert "optim.rollout_correction.mode=tis" in finding.advice
    corrected = {
        **DEFAULT_CONFIG,
        "optim": {**DEFAULT_CONFIG["optim"], "rollout_correction": {"mode": "tis"}},
    }
    assert "sampler_mismatch" not in fired(metrics, corrected)  # corrected for: the check stays quiet
    metrics[M.LOGP_MISMATCH_MEAN] = series(np.full(len(STEPS), 6e-6))  # a float32 engine
    assert "sampler_mismatch" not in fired(metrics)


def test_every_check_has_a_trigger_test_here() -> None:
    tested = {"on_policy", "grad_clip_every_step", "zero_std_groups", "entropy_collapse"}
    tested |= {"high_clip_fraction", "growing_kl", "nonfinite", "truncated_reward_rise"}
    tested |= {"repeated_prompt_reward_rise", "sampler_mismatch"}
    assert tested == set(DIAGNOSTICS)


def make_run(seed: int, metrics: dict, variant: str) -> Run:
    return Run(
        path=Path(variant, str(seed)),
        name=f"{variant}/{seed}",
        overrides=[f"loss={variant}", f"seed={seed}"],
        status="finished",
        seed=seed,
        metrics=metrics,
        config=DEFAULT_CONFIG,
    )


def test_identical_variants_are_named_and_distinct_ones_are_not() -> None:
    same = {seed: default_like(seed) for seed in (0, 1)}
    variants = {
        "loss=bnpo": [make_run(s, copy.deepcopy(m), "bnpo") for s, m in same.items()],
        "loss=drgrpo": [make_run(s, copy.deepcopy(m), "drgrpo") for s, m in same.items()],
        "loss=grpo": [make_run(s, default_like(s + 10), "grpo") for s in same],
    }
    # A value off in the 7th digit is still the same; train/loss may differ (the normaliser scales it).
    variants["loss=drgrpo"][0].metrics[M.REWARD_MEAN][50] = (
        STEPS[50],
        same[0][M.REWARD_MEAN][50][1] * (1 + 1e-7),
    )
    variants["loss=drgrpo"][0].metrics[M.LOSS] = series(np.ones(len(STEPS)))
    assert identical_variants(variants) == [(["loss=bnpo", "loss=drgrpo"], [0, 1])]
    # Different from the second rollout on: not identical, although the first rollout is the same for all.
    variants["loss=drgrpo"][1].metrics[M.REWARD_MEAN][1] = (8, 0.99)
    assert identical_variants(variants) == []


def test_identical_variants_form_groups_and_entropy_may_drift_a_little() -> None:
    runs = {v: [make_run(0, default_like(0), v)] for v in ("grpo", "gspo", "sapo", "bnpo")}
    runs["bnpo"][0].metrics = default_like(1)
    # Float rounding moves entropy in the 5th digit when the updates are the same (measured on real runs).
    runs["sapo"][0].metrics[M.ENTROPY] = [(s, v * (1 + 3e-5)) for s, v in runs["sapo"][0].metrics[M.ENTROPY]]
    assert identical_variants(runs) == [(["grpo", "gspo", "sapo"], [0])]
    runs["sapo"][0].metrics[M.ENTROPY] = [(s, v * (1 + 1e-3)) for s, v in runs["sapo"][0].metrics[M.ENTROPY]]
    assert identical_variants(runs) == [(["grpo", "gspo"], [0])]


def test_identical_needs_more_than_the_first_rollouts_of_finished_runs() -> None:
    short = {M.REWARD_MEAN: [(4, 0.2), (8, 0.25)], M.VAL_ACCURACY: [(0, 0.39)]}
    variants = {v: [make_run(0, copy.deepcopy(short), v)] for v in ("a", "b")}
    assert identical_variants(variants) == []
    # A failed run matches any variant up to where it stopped: only finished runs count.
    variants = {v: [make_run(0, default_like(0), v)] for v in ("a", "b")}
    assert identical_variants(variants) == [(["a", "b"], [0])]
    variants["b"][0].status = "failed"
    assert identical_variants(variants) == []


def test_sweep_checks_count_affected_seeds_per_variant() -> None:
    clipped = default_like()
    clipped[M.GRAD_NORM] = series(np.full(len(STEPS), 3.0))
    variants = {
        "loss=bnpo": [make_run(0, clipped, "bnpo"), make_run(1, default_like(1), "bnpo")],
        "loss=grpo": [make_run(0, default_like(0), "grpo")],
    }
    results = {r.diagnostic: r for r in diagnose_sweep(variants)}
    clip = results["grad_clip_every_step"]
    assert list(clip.variants) == ["loss=bnpo"] and len(clip.variants["loss=bnpo"]) == 1
    assert clip.seeds["loss=bnpo"] == 2 and clip.title == "gradient-norm clipping on every step"
    assert all(not r.variants for check, r in results.items() if check != "grad_clip_every_step")
