"""Diagnostics of how the updates behaved in one run: on-policy updates, gradient clipping on every step,
clip fractions, KL growth, non-finite values. Each returns a `Diagnosis` or None.

Thresholds are set so that the default experiment (`python -m twinkle_exp`) passes every diagnostic; the values
it measured are noted beside each.
"""

from __future__ import annotations

import numpy as np

from twinkle_exp import metric_names as M
from twinkle_exp.tracking.metrics_csv import Series

from ..series import last_quarter, values
from .diagnosis import Diagnosis, config_at, last_quarter_start, metric_values

GRAD_CLIP_FRACTION = 0.9  # default run: 54-64% of logged steps above optim.max_grad_norm = 1
CLIP_MEDIAN = 0.1  # default run: median 0.6% of tokens
KL_GROWTH, KL_FLOOR = 2.0, 0.5  # default run: last quarter 0.20-0.25 nats, 1.3-1.7x the second quarter
# KL growth that buys held-out accuracy is learning, not drift: the default run moves from a 26% warm-start to
# about 85%, and its KL to that warm-start grows about 6x (0.11 -> 0.66 nats) while val/accuracy gains ~30 points.
KL_PAID_GAIN = 0.05
RATIO_TOLERANCE = 1e-3  # |r - 1| below this counts as "ratio exactly 1" (sampler and trainer forward differ)
# Mean |logp_trainer - logp_sampler| per token above which the sampler is another policy: the default run's
# built-in sampler measures 2.0e-7 (max 2.4e-7), a float32 vLLM engine 5e-7 to 6e-6, a bfloat16 one 8e-4.
MISMATCH_MEAN = 1e-4


def on_policy(metrics: dict[str, Series], config: dict) -> Diagnosis | None:
    """optim.mu = 1 with one minibatch: every update is on-policy, every ratio 1, clipping never binds."""
    mu, minibatches = config_at(config, "optim.mu"), config_at(config, "optim.num_minibatches")
    lows, highs = metric_values(metrics, M.RATIO_MIN), metric_values(metrics, M.RATIO_MAX)
    flat = len(lows) > 0 and len(highs) > 0
    flat = flat and np.all(np.abs(lows - 1) < RATIO_TOLERANCE) and np.all(np.abs(highs - 1) < RATIO_TOLERANCE)
    if not (mu == 1 and minibatches == 1) and not flat:
        return None
    evidence = [f"optim.mu = {mu}, optim.num_minibatches = {minibatches}"] if mu == minibatches == 1 else []
    if flat:
        evidence.append(
            f"{M.RATIO_MIN} and {M.RATIO_MAX} within {RATIO_TOLERANCE:g} of 1 at all {len(lows)} logged steps"
        )
    return Diagnosis(
        "on_policy",
        "; ".join(evidence),
        "every importance ratio is 1, so GRPO, GSPO, SAPO (and BNPO, CISPO) differ only by their normaliser "
        "and no clip ever binds: set optim.mu >= 2 or optim.num_minibatches >= 2 to compare the losses themselves",
    )


def grad_clip_every_step(metrics: dict[str, Series], config: dict) -> Diagnosis | None:
    """train/grad_norm (before clipping) above optim.max_grad_norm on (nearly) every logged step."""
    limit, series = config_at(config, "optim.max_grad_norm"), metrics.get(M.GRAD_NORM, [])
    if not isinstance(limit, (int, float)) or limit <= 0 or not series:
        return None
    norms = values(series)
    above = norms > limit
    if above.mean() < GRAD_CLIP_FRACTION:
        return None
    return Diagnosis(
        "grad_clip_every_step",
        f"{M.GRAD_NORM} > optim.max_grad_norm = {limit:g} at {above.sum()} of {len(norms)} logged steps "
        f"(median {np.median(norms):.3g}, steps {series[0][0]}-{series[-1][0]})",
        "every update is rescaled to the same norm, so variants that differ only by a scalar normaliser "
        "(BNPO, Dr.GRPO, CISPO without caps) make the same updates: raise optim.max_grad_norm above the typical "
        f"norm (e.g. {2 * np.median(norms):.2g}) or lower optim.lr",
    )


def high_clip_fraction(metrics: dict[str, Series], config: dict) -> Diagnosis | None:
    """Median clip fraction above CLIP_MEDIAN: updates far off-policy, most tokens without gradient."""
    for key in (M.CLIP_REGION, M.CISPO_CLIP):
        series = metrics.get(key, [])
        fractions = values(series)
        if len(fractions) and np.median(fractions) > CLIP_MEDIAN:
            peak = int(np.argmax(fractions))
            return Diagnosis(
                "high_clip_fraction",
                f"{key}: median {np.median(fractions):.1%} of tokens over {len(fractions)} logged steps "
                f"(max {fractions[peak]:.1%} at step {series[peak][0]})",
                "clip fractions should stay at a few percent: lower optim.lr, optim.mu or "
                "optim.num_minibatches (fewer updates per rollout), or widen loss.clip_range",
            )
    return None


def growing_kl(metrics: dict[str, Series], config: dict) -> Diagnosis | None:
    """KL to the reference over the last quarter >= KL_GROWTH x the second quarter's, and >= KL_FLOOR nats,
    while val/accuracy (when logged) gained less than KL_PAID_GAIN between the same two spans."""
    series = metrics.get(M.KL, [])
    if len(series) < 8:
        return None
    quarter = len(series) // 4
    middle = np.mean([v for _, v in series[quarter : 2 * quarter]])
    end = values(last_quarter(series)).mean()
    if end < KL_FLOOR or end < KL_GROWTH * middle:
        return None
    spans = (series[quarter][0], series[2 * quarter - 1][0]), (last_quarter_start(series), series[-1][0])
    accuracy = [_mean_over(metrics.get(M.VAL_ACCURACY, []), *span) for span in spans]
    paid = ""
    if None not in accuracy:
        if accuracy[1] - accuracy[0] >= KL_PAID_GAIN:
            return None
        paid = f", while {M.VAL_ACCURACY} went from {accuracy[0]:.1%} to {accuracy[1]:.1%}"
    return Diagnosis(
        "growing_kl",
        f"{M.KL}: mean {middle:.3g} over steps {spans[0][0]}-{spans[0][1]}, "
        f"{end:.3g} over steps {spans[1][0]}-{spans[1][1]} (x{end / max(middle, 1e-12):.1f}){paid}",
        f"the policy keeps moving away from the reference without gaining held-out accuracy: raise loss.beta "
        f"(now {config_at(config, 'loss.beta')}), lower optim.lr, or check the reward for a shortcut the policy exploits",
    )


def sampler_mismatch(metrics: dict[str, Series], config: dict) -> Diagnosis | None:
    """The sampler's log-probs differ from the trainer's (train/logp_mismatch/mean above MISMATCH_MEAN on
    average: a bfloat16 sampler, a vLLM engine in low precision) and no rollout correction weighs the updates."""
    gaps = metric_values(metrics, M.LOGP_MISMATCH_MEAN)
    if not len(gaps) or float(np.mean(gaps)) < MISMATCH_MEAN:
        return None
    mode = config_at(config, "optim.rollout_correction.mode")
    if mode not in (None, "none"):
        return None
    peaks = metric_values(metrics, M.LOGP_MISMATCH_MAX)
    peak = f", max {peaks.max():.3g}" if len(peaks) else ""
    return Diagnosis(
        "sampler_mismatch",
        f"{M.LOGP_MISMATCH_MEAN}: mean {np.mean(gaps):.3g} nats per token over {len(gaps)} logged steps{peak}, "
        "with no rollout correction",
        "the completions come from another policy than the one the ratios assume, so every loss is off-policy "
        "by that gap: set optim.rollout_correction.mode=tis (or mis / the sequence mask), or sample in float32 "
        "(rollout.sampler_dtype=null; rollout.vllm.dtype=float32 with the vLLM engine)",
    )


def _mean_over(series: Series, first: int, last: int) -> float | None:
    """The mean of `series` over steps first..last; its last value before `first` if none falls there; None
    when it has no value by `last`."""
    inside = [v for step, v in series if first <= step <= last]
    if inside:
        return float(np.mean(inside))
    before = [v for step, v in series if step < first]
    return before[-1] if before else None


def nonfinite_values(nonfinite: dict[str, list[int]], config: dict) -> Diagnosis | None:
    """Any metric logged as NaN or +-inf."""
    if not nonfinite:
        return None
    first = min(steps[0] for steps in nonfinite.values())
    keys = ", ".join(f"{key} ({len(steps)} steps)" for key, steps in sorted(nonfinite.items()))
    return Diagnosis(
        "nonfinite",
        f"NaN or inf from step {first}: {keys}",
        "lower optim.lr or optim.max_grad_norm, use trainer.precision=32-true, and check the reward "
        "functions for NaN; the report leaves these values out of every statistic",
    )
