"""The zoo's per-token objectives (see `objectives.py` for the contract and `docs/losses.md` for sources).

Notation as in `core`: `d = clamp(logp - old, -20, 20)` on completion tokens, `r = exp(d)`, `A` the advantage.
Sequence-level quantities go through `seq_ops`, so packed rows give what the padded batch gives.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss import seq_ops

if TYPE_CHECKING:
    from twinkle_exp.loss.batch import TokenBatch
    from twinkle_exp.loss.core import LossSpec

LOG_RATIO_CLAMP = 20.0


def _log_ratio(b: TokenBatch) -> torch.Tensor:
    return (b.logps - b.old_logps).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP) * b.mask


def reinforce(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """GPG: -A logp, no importance weight at all (the update is on-policy by construction)."""
    return -b.advantages * b.logps, {}


def gmpo(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """-A_i exp(mean_t sgn(A) min(sgn(A) d, sgn(A) clip(d, -lo, hi))) per sequence, on each of its tokens."""
    d = _log_ratio(b)
    adv = b.advantages
    sign = torch.sign(adv)
    clipped = d.clamp(-spec.clip_low, spec.clip_high)
    # For A > 0 only a rise above hi is cut off, for A < 0 only a fall below -lo: the pessimistic bound.
    d_min = sign * torch.minimum(sign * d, sign * clipped)
    seq_ratio = torch.exp(seq_ops.seq_mean(d_min, b))
    seq_adv = seq_ops.seq_mean(adv, b)
    loss = seq_ops.per_token(-seq_adv * seq_ratio, b)
    dd = d.detach()
    return loss, {
        K.CLIP_LOW: (dd < -spec.clip_low) & (adv < 0),
        K.CLIP_HIGH: (dd > spec.clip_high) & (adv > 0),
    }


def _covariance(b: TokenBatch) -> torch.Tensor:
    """`[B, T]` centred product (A - mean A)(logp - mean logp) over this call's completion tokens."""
    logp = b.logps.detach()
    adv = b.advantages.detach()
    cov = (adv - seq_ops.masked_mean(adv, b.mask)) * (logp - seq_ops.masked_mean(logp, b.mask))
    return cov.masked_fill(~b.mask, -math.inf)


def clip_cov(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """PPO clip, then the gradient of a random `clip_cov_ratio` share of the tokens whose covariance lies in
    (lb, ub) (and that the PPO clip left alone) is detached."""
    opts = spec.options
    adv = b.advantages
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - spec.clip_low, 1.0 + spec.clip_high)
    loss = torch.maximum(unclipped, clipped)
    cov = _covariance(b)
    band = (cov > opts["clip_cov_lb"]) & (cov < opts["clip_cov_ub"]) & b.mask & ~(clipped > unclipped)
    # Row-major order is the sequences' order in padded and packed layouts alike, so one seed picks the same.
    candidates = band.reshape(-1).nonzero().flatten()
    count = max(int(opts["clip_cov_ratio"] * b.num_tokens), 1)
    chosen = candidates[torch.randperm(candidates.numel(), device=candidates.device)[:count]]
    selected = torch.zeros_like(band).reshape(-1).index_fill(0, chosen, True).reshape(band.shape)
    return torch.where(selected, loss.detach(), loss), {K.CLIP_COV: selected}


def kl_cov(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """-A r on every token; the top `kl_cov_ratio` share by covariance also pays `kl_cov_coef |d|`."""
    opts = spec.options
    cov = _covariance(b).reshape(-1)
    count = min(max(int(b.num_tokens * opts["kl_cov_ratio"]), 1), b.num_tokens)
    top = torch.topk(cov, count).indices
    selected = torch.zeros_like(b.mask).reshape(-1).index_fill(0, top, True).reshape(b.mask.shape)
    penalty = opts["kl_cov_coef"] * _log_ratio(b).abs()
    return -b.advantages * ratio + selected * penalty, {K.KL_COV: selected}


def vespo(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """-sg(phi(w)) A logp with w = exp(sum_t d) per sequence and phi(w) = w^k exp(lambda (1 - w))."""
    opts = spec.options
    log_w = seq_ops.per_token(seq_ops.seq_sum(_log_ratio(b).detach(), b), b).clamp(math.log(1e-8), 20.0)
    positive = b.advantages >= 0
    k = torch.where(positive, opts["k_pos"], opts["k_neg"]).to(log_w.dtype)
    lam = torch.where(positive, opts["lambda_pos"], opts["lambda_neg"]).to(log_w.dtype).clamp(min=1e-4)
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    return -phi * b.advantages * b.logps, {K.VESPO_PHI: phi}


def _dppo(spec: LossSpec, b: TokenBatch, keep_pos: torch.Tensor, keep_neg: torch.Tensor, ratio: torch.Tensor):
    adv = b.advantages
    keep = torch.where(adv > 0, keep_pos, keep_neg) & b.mask
    cap = spec.options.get("ratio_cap")
    weight = (ratio if cap is None else ratio.clamp(max=cap)).detach()
    loss = -weight * adv * b.logps * keep
    return loss, {K.CLIP_LOW: ~keep & (adv < 0) & b.mask, K.CLIP_HIGH: ~keep & (adv > 0) & b.mask}


@torch.no_grad()
def _probs(b: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
    return b.logps.detach().exp(), b.old_logps.exp()


def dppo_tv(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Keep a token unless its probability moved past the binary total-variation bound in A's direction."""
    p, p_old = _probs(b)
    return _dppo(spec, b, (p - p_old) <= spec.clip_high, (p - p_old) >= -spec.clip_low, ratio)


def dppo_kl(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Keep a token unless KL(Bern(p_old) || Bern(p)) exceeds the bound while p moved in A's direction."""
    with torch.no_grad():
        p, p_old = _probs(b)
        q, q_old = -torch.expm1(b.logps.detach()), -torch.expm1(b.old_logps)  # 1 - p, accurate near p = 1
        binary_kl = (
            p_old * (b.old_logps - b.logps.detach()) + torch.xlogy(q_old, q_old) - torch.xlogy(q_old, q)
        )
    keep_pos = (binary_kl <= spec.clip_high) | (p <= p_old)
    keep_neg = (binary_kl <= spec.clip_low) | (p >= p_old)
    return _dppo(spec, b, keep_pos, keep_neg, ratio)


def topr(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """A > 0: -A logp (no weight); A <= 0: -sg(clip(pi/mu, 0, 1)) A logp, pi/mu the sequence's (paper) or
    the token's (ROLL's form, `ratio_level="token"`) ratio."""
    d = _log_ratio(b).detach()
    if spec.options["ratio_level"] == "sequence":
        d = seq_ops.per_token(seq_ops.seq_sum(d, b), b).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    weight = torch.where(b.advantages > 0, torch.ones_like(d), d.exp().clamp(max=1.0))
    return -weight * b.advantages * b.logps, {K.TOPR_WEIGHT: weight}


def kimi(spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """-A logp + (tau / 2) (log pi/pi_old)^2, the log-ratio the sequence's (paper) or each token's (ROLL's)."""
    d = _log_ratio(b)
    if spec.options["ratio_level"] == "sequence":
        penalty = seq_ops.spread(0.5 * spec.options["tau"] * seq_ops.seq_sum(d, b).square(), b)
    else:
        penalty = 0.5 * spec.options["tau"] * d.square()
    return -b.advantages * b.logps + penalty, {K.KIMI_PENALTY: penalty.detach()}
