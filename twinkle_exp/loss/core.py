"""The shared policy-gradient pipeline: importance weight -> per-token objective -> masks -> KL -> aggregation.

A loss hands `compute_loss` its pipeline settings (`LossSpec`) and its objective (`Objective`: the loss
object itself, see `base.PolicyGradientLoss`). This module is pure functions of tensors.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch

from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss import seq_ops
from twinkle_exp.loss.batch import TokenBatch
from twinkle_exp.loss.kl import kl_penalty

IMPORTANCE_LEVELS = ("token", "sequence", "sequence_token")
AGGREGATIONS = ("seq_mean_token_mean", "token_mean", "constant", "seq_sum")
OFF_POLICY_REFERENCES = ("sampler", "old")  # what the off-policy mask measures the policy's gap against
ENTROPY_TOKENS = ("all", "kept")  # the tokens the entropy bonus averages over
CLIP_SIDES = ("low", "high")
LOG_RATIO_CLAMP = 20.0  # |log pi/pi_old| beyond this is clamped before exp: e^20 is already far off-policy

__all__ = [
    "AGGREGATIONS",
    "CLIP_SIDES",
    "ENTROPY_TOKENS",
    "IMPORTANCE_LEVELS",
    "LOG_RATIO_CLAMP",
    "OFF_POLICY_REFERENCES",
    "LossOutput",
    "LossSpec",
]


class LossOutput(NamedTuple):
    loss: torch.Tensor  # scalar with grad
    metrics: dict[str, torch.Tensor]  # detached scalars, keys from metric_keys and the objective's own


@dataclass(frozen=True)
class LossSpec:
    """The pipeline's settings, the same for every objective (an objective's own parameters stay its own)."""

    importance: str  # one of IMPORTANCE_LEVELS
    aggregation: str  # one of AGGREGATIONS
    clip_range: float  # the lower clip: r < 1 - clip_range with A < 0
    clip_range_high: float  # the upper clip: r > 1 + clip_range_high with A > 0 (resolved, never None)
    beta: float = 0.0
    kl_estimator: str = "k3"
    max_completion_length: int | None = None  # the "constant" aggregation's length (None: the longest)
    # The switches (docs/losses.md); each default leaves the pipeline as it was.
    kl_bias_correction: bool = False  # KL term weighted by the importance ratio (DeepSeek-V3.2, TRL)
    off_policy_mask_threshold: float | None = None  # drop A < 0 sequences whose mean (mu - logp) exceeds it
    # "sampler": the gap is to the sampler's log-probs when the call has them (else the old ones); "old".
    off_policy_mask_reference: str = "sampler"
    top_entropy_quantile: float = 1.0  # train the policy term on the top share of tokens by entropy only
    entropy_coef: float = 0.0  # loss -= coef * token mean of the entropy over the step
    entropy_tokens: str = "all"  # the bonus's mean over "all" tokens, or those the top-entropy mask "kept"

    @property
    def needs_entropy(self) -> bool:
        return self.top_entropy_quantile < 1.0 or self.entropy_coef != 0.0


class Objective(Protocol):
    """A per-token policy loss, as the pipeline calls it."""

    @property
    def metric_keys(self) -> tuple[str, ...]:
        """The keys of `per_token`'s metrics dict, reported (as 0) even for an empty batch."""

    clip_sides: tuple[str, ...]  # of CLIP_SIDES: the PPO-style clip counts the pipeline reports for it
    # True: `per_token` applies `b.weights` (the rollout correction) itself, the pipeline does not.
    applies_rollout_weights: bool
    # True: `per_token` applies `b.policy_keep` (the switches' token masks) itself, the pipeline does not.
    applies_policy_keep: bool

    def per_token(
        self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """`ratio` `[B, T]` -> (`[B, T]` per-token policy loss, `{metric key: [B, T] indicator or weight}`).

        Two keys are special: `K.CLIP_LOW` and `K.CLIP_HIGH`, bool `[B, T]`, replace the pipeline's PPO-style
        clip counts for an objective whose trust region is not the ratio's (GMPO's log-space clip, DPPO's)."""


def log_ratio(b: TokenBatch) -> torch.Tensor:
    """`[B, T]` d = log pi - log pi_old, clamped to +-LOG_RATIO_CLAMP, 0 off the mask; grad through logps."""
    return (b.logps - b.old_logps).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP) * b.mask


def _importance_weight(spec: LossSpec, b: TokenBatch) -> torch.Tensor:
    """`[B, T]` ratio r = pi / pi_old per token, or GSPO's sequence ratio broadcast over its tokens."""
    d = log_ratio(b)
    if spec.importance == "token":
        return torch.exp(d)
    # GSPO: s_i = exp(mean_t d_it), the length-normalised sequence likelihood ratio; grad flows through the mean.
    seq_log_ratio = seq_ops.per_token(seq_ops.seq_mean(d, b), b)
    if spec.importance == "sequence":
        return torch.exp(seq_log_ratio)
    # GSPO-token: the value of s_i, the gradient of each token's own log-prob (s_i grad logp_t).
    return torch.exp(seq_log_ratio.detach() + b.logps - b.logps.detach())


def _aggregate(spec: LossSpec, b: TokenBatch, per_token: torch.Tensor, num_sequences: int, num_tokens: int):
    """Scalar loss from `[B, T]` per-token losses with the optimizer step's totals as normalisers."""
    per_token = per_token * b.mask
    if spec.aggregation == "token_mean":
        return per_token.sum() / num_tokens
    if spec.aggregation == "seq_sum":
        return per_token.sum() / num_sequences
    if spec.aggregation == "constant":
        if spec.max_completion_length is not None:
            length = spec.max_completion_length
        else:
            length = int(torch.bincount(b.seq_ids[b.mask], minlength=1).max())
        return per_token.sum() / (num_sequences * length)
    return seq_ops.seq_mean(per_token, b).sum() / num_sequences


def _check_totals(b: TokenBatch, num_sequences: int | None, num_tokens: int | None) -> tuple[int, int]:
    seqs = b.counted_seqs if num_sequences is None else int(num_sequences)
    tokens = b.num_tokens if num_tokens is None else int(num_tokens)
    if seqs < b.counted_seqs:
        raise ValueError(f"num_sequences={seqs} is smaller than the {b.counted_seqs} sequences in this batch")
    if tokens < b.num_tokens:
        raise ValueError(
            f"num_tokens={tokens} is smaller than the {b.num_tokens} completion tokens in this batch"
        )
    return seqs, tokens


def _metric_keys(spec: LossSpec, objective: Objective, b: TokenBatch) -> list[str]:
    keys = list(K.COMMON) + ([K.KL] if b.ref_logps is not None else [])
    keys += objective.metric_keys
    keys += [K.OFF_POLICY_MASKED] if spec.off_policy_mask_threshold is not None else []
    keys += [K.TOP_ENTROPY_KEPT] if spec.top_entropy_quantile < 1.0 else []
    return keys


def _empty_output(b: TokenBatch, spec: LossSpec, objective: Objective) -> LossOutput:
    warnings.warn("the batch has no completion tokens; returning a zero loss", RuntimeWarning, stacklevel=3)
    zero = b.logps.sum() * 0.0
    if b.entropies is not None:
        zero = zero + b.entropies.sum() * 0.0
    return LossOutput(zero, {key: zero.detach().clone() for key in _metric_keys(spec, objective, b)})


def _policy_masks(spec: LossSpec, b: TokenBatch) -> dict[str, torch.Tensor]:
    """The switches that drop tokens from the policy term: `{metric key: [B, T] bool, True = dropped}`."""
    masks = {}
    if spec.off_policy_mask_threshold is not None:
        # DeepSeek-V3.2: a sequence with A < 0 whose mean log(pi_old / pi) exceeds the bound teaches nothing.
        # Its pi_old is the sampling policy, so the gap includes the sampler's own mismatch when it is known.
        use_sampler = spec.off_policy_mask_reference == "sampler" and b.sampler_logps is not None
        behaviour = b.sampler_logps if use_sampler else b.old_logps
        gap = seq_ops.per_token(seq_ops.seq_mean(behaviour - b.logps.detach(), b), b)
        masks[K.OFF_POLICY_MASKED] = (b.advantages < 0) & (gap > spec.off_policy_mask_threshold) & b.mask
    if spec.top_entropy_quantile < 1.0:
        entropy = b.entropies.detach()
        threshold = torch.quantile(entropy[b.mask].float(), 1.0 - spec.top_entropy_quantile)
        masks[K.TOP_ENTROPY_KEPT] = (entropy < threshold.to(entropy.dtype)) & b.mask
    return masks


def _entropy_bonus(spec: LossSpec, b: TokenBatch, masks: dict, num_tokens: int) -> torch.Tensor:
    """The entropy the bonus adds: the step's token mean over all tokens, or (`entropy_tokens="kept"`, TRL's
    form) this call's mean over the tokens the top-entropy mask kept, weighted by its share of the step."""
    if spec.entropy_tokens == "all" or K.TOP_ENTROPY_KEPT not in masks:
        return (b.entropies * b.mask).sum() / num_tokens
    kept = b.mask & ~masks[K.TOP_ENTROPY_KEPT]
    return (b.entropies * kept).sum() / kept.sum().clamp(min=1) * (b.num_tokens / num_tokens)


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
    spec: LossSpec,
    objective: Objective,
    b: TokenBatch,
    *,
    num_sequences: int | None = None,
    num_tokens: int | None = None,
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
    if spec.needs_entropy and b.entropies is None:
        raise ValueError(
            "top_entropy_quantile < 1 or entropy_coef != 0 needs entropies [B, T] (or logits to compute them)"
        )
    if b.num_tokens == 0:
        return _empty_output(b, spec, objective)

    ratio = _importance_weight(spec, b)
    masks = _policy_masks(spec, b)
    if masks:
        b = dataclasses.replace(b, policy_keep=b.mask & ~torch.stack(list(masks.values())).any(0))
    policy_per_token, extra = objective.per_token(spec, b, ratio)
    if b.policy_keep is not None and not objective.applies_policy_keep:
        policy_per_token = policy_per_token * b.policy_keep
    if b.weights is not None and not objective.applies_rollout_weights:
        policy_per_token = policy_per_token * b.weights
    per_token = policy_per_token
    metrics: dict[str, torch.Tensor] = {}
    if b.ref_logps is not None:
        kl = kl_penalty(b.logps, b.ref_logps, spec.kl_estimator)
        metrics[K.KL] = seq_ops.masked_mean(kl, b.mask)
        if spec.beta > 0:
            # The bias correction weighs the estimate by pi / pi_old: it was sampled from pi_old, not pi.
            per_token = per_token + spec.beta * (kl * ratio if spec.kl_bias_correction else kl)

    loss = _aggregate(spec, b, per_token, seqs, tokens)
    if spec.entropy_coef != 0.0:
        loss = loss - spec.entropy_coef * _entropy_bonus(spec, b, masks, tokens)
    mask = b.mask
    adv = b.advantages
    r = ratio.detach()
    sides = objective.clip_sides
    default_low = (r < 1.0 - spec.clip_range) & (adv < 0) if "low" in sides else torch.zeros_like(mask)
    default_high = (r > 1.0 + spec.clip_range_high) & (adv > 0) if "high" in sides else torch.zeros_like(mask)
    low = extra.pop(K.CLIP_LOW, default_low)
    high = extra.pop(K.CLIP_HIGH, default_high)
    metrics.update(
        {
            K.RATIO_MEAN: seq_ops.masked_mean(r, mask),
            K.RATIO_MIN: r[mask].min(),
            K.RATIO_MAX: r[mask].max(),
            K.CLIP_LOW: seq_ops.masked_mean(low, mask),
            K.CLIP_HIGH: seq_ops.masked_mean(high, mask),
            K.CLIP_REGION: seq_ops.masked_mean(low | high, mask),
            K.POLICY_LOSS: _aggregate(spec, b, policy_per_token, seqs, tokens),
            K.ADV_POSITIVE: seq_ops.masked_mean(adv > 0, mask),
            K.ADV_NEGATIVE: seq_ops.masked_mean(adv < 0, mask),
            K.CLIP_HIGH_LOW_PROB: seq_ops.masked_mean(
                high & (b.old_logps.detach().exp() < K.LOW_PROB_OLD), mask
            ),
        }
    )
    extra.update(masks)
    if K.TOP_ENTROPY_KEPT in extra:  # reported as the share kept, the mask being the share dropped
        extra[K.TOP_ENTROPY_KEPT] = ~extra[K.TOP_ENTROPY_KEPT]
    metrics.update({key: seq_ops.masked_mean(value, mask) for key, value in extra.items()})
    return LossOutput(loss, {key: value.detach().float() for key, value in metrics.items()})
