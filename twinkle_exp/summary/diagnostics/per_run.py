"""The diagnostics of one run, by id: `diagnose_run(metrics, nonfinite, config, samples)` -> its diagnoses, in
order, those about completions quoting some of the run's own (`quotes`).

Pure functions that read metrics by key and step only, so they work whether a metric was logged once per
rollout or once per optimizer step. The diagnostics across runs are in `sweep` and `variants`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from twinkle_exp.tracking.metrics_csv import Series

from .diagnosis import Diagnosis
from .quotes import quotes_for
from .signal import entropy_collapse, repeated_prompt_reward_rise, truncated_reward_rise, zero_std_groups
from .updates import (
    grad_clip_every_step,
    growing_kl,
    high_clip_fraction,
    nonfinite_values,
    on_policy,
    sampler_mismatch,
)

# id -> (title, diagnostic on (metrics, config)); nonfinite_values reads the run's non-finite cells instead.
DIAGNOSTICS: dict[str, tuple[str, Callable]] = {
    "on_policy": ("strictly on-policy updates", on_policy),
    "grad_clip_every_step": ("gradient-norm clipping on every step", grad_clip_every_step),
    "zero_std_groups": ("groups with identical rewards", zero_std_groups),
    "entropy_collapse": ("entropy collapse", entropy_collapse),
    "high_clip_fraction": ("high clip fraction", high_clip_fraction),
    "growing_kl": ("KL growing without bound", growing_kl),
    "sampler_mismatch": ("sampler and trainer log-probs disagree", sampler_mismatch),
    "truncated_reward_rise": ("reward rising on cut-off completions", truncated_reward_rise),
    "repeated_prompt_reward_rise": (
        "reward rising on completions that repeat the prompt",
        repeated_prompt_reward_rise,
    ),
    "nonfinite": ("non-finite values", nonfinite_values),
}


def diagnose_run(
    metrics: dict[str, Series],
    nonfinite: dict[str, list[int]],
    config: dict,
    samples: Sequence[dict[str, Any]] = (),
) -> list[Diagnosis]:
    """Every diagnostic of DIAGNOSTICS on one run, in that order; `config` is the job's resolved config
    (nested dict); `samples` the rows of its samples.jsonl, which the checks about completions quote."""
    diagnoses = []
    for diagnostic, (_title, fn) in DIAGNOSTICS.items():
        diagnosis = fn(nonfinite, config) if diagnostic == "nonfinite" else fn(metrics, config)
        if diagnosis is not None:
            diagnoses.append(dataclasses.replace(diagnosis, quotes=quotes_for(diagnostic, samples)))
    return diagnoses
