"""The shared policy-gradient pipeline: importance weight -> per-token objective -> KL -> aggregation.

The six public losses are presets of `LossSpec`; this module is pure functions of tensors.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss.batch import TokenBatch
from twinkle_exp.loss.kl import kl_penalty

IMPORTANCE_LEVELS = ("token", "sequence")
AGGREGATIONS = ("seq_mean_token_mean", "token_mean", "constant")
LOG_RATIO_CLAMP = 20.0


class LossOutput(NamedTuple):
    loss: torch.Tensor  # scalar with grad
    metrics: dict[str, torch.Tensor]  # detached scalars, keys from metric_keys


@dataclass(frozen=True)
class LossSpec:
    importance: str  # one of IMPORTANCE_LEVELS
    objective: str  # a key of OBJECTIVES
    aggregation: str  # one of AGGREGATIONS
    clip_low: float
    clip_high: float
    beta: float = 0.0
    kl_estimator: str = "k3"
    tau_pos: float = 1.0
    tau_neg: float = 1.0
    max_completion_length: int | None = None


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


def _importance_weight(spec: LossSpec, b: TokenBatch) -> torch.Tensor:
    """`[B, T]` ratio r = pi / pi_old per token, or GSPO's sequence ratio broadcast over its tokens."""
    log_ratio = (b.logps - b.old_logps).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP) * b.mask
    if spec.importance == "token":
        return torch.exp(log_ratio)
    # GSPO: s_i = exp(mean_t d_it), the length-normalised sequence likelihood ratio; grad flows through the mean.
    seq_sum = torch.zeros(b.num_seqs, dtype=log_ratio.dtype, device=log_ratio.device)
    seq_sum = seq_sum.index_add(0, b.seq_ids.reshape(-1), log_ratio.reshape(-1))
    seq_len = torch.zeros_like(seq_sum).index_add(
        0, b.seq_ids.reshape(-1), b.mask.reshape(-1).to(seq_sum.dtype)
    )
    return torch.exp(seq_sum / seq_len.clamp(min=1))[b.seq_ids]


def _clip(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    clipped = ratio.clamp(1.0 - spec.clip_low, 1.0 + spec.clip_high)
    return -torch.minimum(ratio * b.advantages, clipped * b.advantages), {}


def _sapo(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    tau = torch.where(b.advantages > 0, spec.tau_pos, spec.tau_neg).to(ratio.dtype)
    gate = torch.sigmoid(tau * (ratio - 1.0))
    # d/dlogp of (4/tau) sigmoid(tau (r - 1)) is 4 s (1 - s) r: the soft gate on the policy gradient.
    return -(4.0 / tau) * gate * b.advantages, {K.SAPO_GATE: 4.0 * gate * (1.0 - gate)}


def _cispo(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    # A capped, stop-gradient importance weight on REINFORCE, so clipped tokens still get gradient.
    cap = 1.0 + spec.clip_high
    weight = ratio.clamp(max=cap).detach()
    return -weight * b.advantages * b.logps, {K.CISPO_CLIP: (ratio > cap).to(ratio.dtype)}


@dataclass(frozen=True)
class Objective:
    """What the pipeline needs to know of a per-token objective."""

    # (spec, batch, ratio [B, T]) -> ([B, T] per-token policy loss, {metric key: [B, T] indicator or weight})
    per_token: Callable[[LossSpec, TokenBatch, torch.Tensor], tuple[torch.Tensor, dict]]
    metric_keys: tuple[str, ...]  # the keys of that dict, reported even for an empty batch
    lower_clip: bool  # whether r < 1 - lo with A < 0 is clipped (counted in clip_ratio/low_mean)


OBJECTIVES: dict[str, Objective] = {
    "clip": Objective(_clip, (), lower_clip=True),
    "sapo": Objective(_sapo, (K.SAPO_GATE,), lower_clip=True),
    "cispo": Objective(_cispo, (K.CISPO_CLIP,), lower_clip=False),
}


def _aggregate(spec: LossSpec, b: TokenBatch, per_token: torch.Tensor, num_sequences: int, num_tokens: int):
    """Scalar loss from `[B, T]` per-token losses with the optimizer step's totals as normalisers."""
    per_token = per_token * b.mask
    if spec.aggregation == "token_mean":
        return per_token.sum() / num_tokens
    if spec.aggregation == "constant":
        if spec.max_completion_length is not None:
            length = spec.max_completion_length
        else:
            length = int(torch.bincount(b.seq_ids[b.mask], minlength=1).max())
        return per_token.sum() / (num_sequences * length)
    seq_loss = torch.zeros(b.num_seqs, dtype=per_token.dtype, device=per_token.device)
    seq_loss = seq_loss.index_add(0, b.seq_ids.reshape(-1), per_token.reshape(-1))
    seq_len = torch.bincount(b.seq_ids[b.mask], minlength=b.num_seqs).to(per_token.dtype)
    return (seq_loss / seq_len.clamp(min=1)).sum() / num_sequences


def _check_totals(b: TokenBatch, num_sequences: int | None, num_tokens: int | None) -> tuple[int, int]:
    seqs = b.num_seqs if num_sequences is None else int(num_sequences)
    tokens = b.num_tokens if num_tokens is None else int(num_tokens)
    if seqs < b.num_seqs:
        raise ValueError(f"num_sequences={seqs} is smaller than the {b.num_seqs} sequences in this batch")
    if tokens < b.num_tokens:
        raise ValueError(
            f"num_tokens={tokens} is smaller than the {b.num_tokens} completion tokens in this batch"
        )
    return seqs, tokens


def _empty_output(b: TokenBatch, spec: LossSpec) -> LossOutput:
    warnings.warn("the batch has no completion tokens; returning a zero loss", RuntimeWarning, stacklevel=3)
    zero = b.logps.sum() * 0.0
    keys = list(K.COMMON) + ([K.KL] if b.ref_logps is not None else [])
    keys += OBJECTIVES[spec.objective].metric_keys
    return LossOutput(zero, {key: zero.detach().clone() for key in keys})


def derived_clip_metrics(shares: dict[str, float], prefix: str = "") -> dict[str, float]:
    """The clip fraction within each sign of the advantage, and the low-probability share of the up-clipped
    tokens (`metric_keys.DERIVED`), from a step's reduced token shares keyed `prefix` + a `metric_keys` key.

    Ratios of the step's shares rather than per-micro-batch ratios, so that they are exact for any split."""
    out = {}
    for key, (numerator, denominator) in K.DERIVED.items():
        if shares.get(prefix + denominator, 0.0) > 0 and prefix + numerator in shares:
            out[prefix + key] = shares[prefix + numerator] / shares[prefix + denominator]
    return out


def compute_loss(
    spec: LossSpec, b: TokenBatch, *, num_sequences: int | None = None, num_tokens: int | None = None
) -> LossOutput:
    """Loss and metrics for one (micro-)batch.

    `num_sequences` / `num_tokens` are the optimizer step's totals (default: this batch's own). Passing
    them makes the sum of micro-batch losses equal the full-batch loss, for every aggregation; a sequence
    must not be split across micro-batches.
    """
    seqs, tokens = _check_totals(b, num_sequences, num_tokens)
    # Checked before the empty-batch shortcut: a missing reference is the caller's error on every batch.
    if spec.beta > 0 and b.ref_logps is None:
        raise ValueError(
            f"beta={spec.beta} > 0 needs ref_logps (reference log-probs); pass them or set beta=0"
        )
    if b.num_tokens == 0:
        return _empty_output(b, spec)

    objective = OBJECTIVES[spec.objective]
    ratio = _importance_weight(spec, b)
    policy_per_token, extra = objective.per_token(spec, b, ratio)
    per_token = policy_per_token
    metrics: dict[str, torch.Tensor] = {}
    if b.ref_logps is not None:
        kl = kl_penalty(b.logps, b.ref_logps, spec.kl_estimator)
        metrics[K.KL] = _masked_mean(kl, b.mask)
        if spec.beta > 0:
            per_token = per_token + spec.beta * kl

    loss = _aggregate(spec, b, per_token, seqs, tokens)
    mask = b.mask
    adv = b.advantages
    r = ratio.detach()
    low = (r < 1.0 - spec.clip_low) & (adv < 0) if objective.lower_clip else torch.zeros_like(mask)
    high = (r > 1.0 + spec.clip_high) & (adv > 0)
    metrics.update(
        {
            K.RATIO_MEAN: _masked_mean(r, mask),
            K.RATIO_MIN: r[mask].min(),
            K.RATIO_MAX: r[mask].max(),
            K.CLIP_LOW: _masked_mean(low, mask),
            K.CLIP_HIGH: _masked_mean(high, mask),
            K.CLIP_REGION: _masked_mean(low | high, mask),
            K.POLICY_LOSS: _aggregate(spec, b, policy_per_token, seqs, tokens),
            K.ADV_POSITIVE: _masked_mean(adv > 0, mask),
            K.ADV_NEGATIVE: _masked_mean(adv < 0, mask),
            K.CLIP_HIGH_LOW_PROB: _masked_mean(high & (b.old_logps.detach().exp() < K.LOW_PROB_OLD), mask),
        }
    )
    metrics.update({key: _masked_mean(value, mask) for key, value in extra.items()})
    return LossOutput(loss, {key: value.detach().float() for key, value in metrics.items()})
