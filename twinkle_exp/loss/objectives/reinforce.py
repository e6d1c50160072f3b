"""The REINFORCE-style family: -w A logp with a stop-gradient weight w (or none), so the trust region is in
the weight or a mask rather than in a clipped ratio. GPG, VESPO, DPPO (TV and KL), TOPR, Kimi k1.5.
Notation as in `clipped`. Where a paper and a peer's code differ the paper is followed and the peer's form,
when it is a one-liner, is a parameter; the docstrings say which.
"""

from __future__ import annotations

import math

import torch

from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss import seq_ops
from twinkle_exp.loss.base import PolicyGradientLoss
from twinkle_exp.loss.batch import TokenBatch
from twinkle_exp.loss.core import LOG_RATIO_CLAMP, LossSpec, log_ratio
from twinkle_exp.loss.params import boolean, non_negative, one_of, optional, param, positive
from twinkle_exp.loss.registry import loss_dataclass, register_loss

RATIO_LEVELS = ("sequence", "token")
VESPO_PHI = "vespo/phi_seq_mean"  # VESPO's sequence weight phi(w), token mean
TOPR_WEIGHT = "topr/weight_mean"  # TOPR's weight: 1 for A > 0, clip(pi/mu, 0, 1) otherwise
KIMI_PENALTY = "kimi/penalty_mean"  # Kimi k1.5's (tau/2) log-ratio^2 term per token


@register_loss
class GPGLoss(PolicyGradientLoss):
    """GPG (Chu et al., 2025, arXiv 2504.02546): -A logp with no importance ratio and no clip, token mean.

    GPG's other parts (its advantage without std and the valid-sample rescaling) are advantage estimators,
    not the loss. `clip_range` is unused.
    """

    name = "gpg"
    advantage_linear = True
    aggregation = "token_mean"
    clip_sides = ()

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        # No importance weight at all: the update is on-policy by construction.
        return -b.advantages * b.logps, {}


@register_loss
class VESPOLoss(PolicyGradientLoss):
    """VESPO (arXiv 2602.10693), as TRL 1.16's `loss_type="vespo"`: -sg(phi(w)) A logp, token mean, with
    w = exp(sum_t d) the sequence's (unnormalised) ratio and phi(w) = w^k exp(lambda (1 - w)), phi(1) = 1;
    (k, lambda) = (k_pos, lambda_pos) for A >= 0, (k_neg, lambda_neg) otherwise. `clip_range` is unused.

    With rollout-correction weights rho_t = pi_old / pi_sampler, `fold_rollout_weights` (the default, TRL's
    form) puts them into w, w = exp(sum_t d + sum_t log rho_t): the paper's w is the ratio to the policy
    that sampled, and phi reshapes that whole ratio. False: phi of pi / pi_old, times rho_t per token.
    The fold takes the weights as per-token factors (TRL allows its token modes only).
    """

    name = "vespo"
    advantage_linear = True
    aggregation = "token_mean"
    metric_keys = (VESPO_PHI,)
    clip_sides = ()

    k_pos: float = param(2.0, non_negative)
    lambda_pos: float = param(3.0, positive)
    k_neg: float = param(3.0, non_negative)
    lambda_neg: float = param(2.0, positive)
    fold_rollout_weights: bool = param(True, boolean)

    @property
    def applies_rollout_weights(self) -> bool:
        return self.fold_rollout_weights

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        log_floor = math.log(1e-8)
        log_d = log_ratio(b).detach()
        if self.fold_rollout_weights and b.weights is not None:
            # A weight of 0 (a token MIS dropped) is log 1e-8, as TRL's clamp makes it.
            log_rho = torch.log(b.weights).clamp(log_floor, LOG_RATIO_CLAMP)
            log_d = log_d + torch.where(b.mask, log_rho, torch.zeros_like(log_rho))
        log_w = seq_ops.per_token(seq_ops.seq_sum(log_d, b), b)
        log_w = log_w.clamp(log_floor, LOG_RATIO_CLAMP)
        positive_adv = b.advantages >= 0
        k = torch.where(positive_adv, self.k_pos, self.k_neg).to(log_w.dtype)
        lam = torch.where(positive_adv, self.lambda_pos, self.lambda_neg).to(log_w.dtype).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
        return -phi * b.advantages * b.logps, {VESPO_PHI: phi}


@loss_dataclass  # a dataclass, so its field reaches the two registered subclasses
class DPPOLoss(PolicyGradientLoss):
    """DPPO (Qi et al., 2026, arXiv 2602.04879): REINFORCE with a stop-gradient ratio weight, masked where the
    policy left a divergence trust region in the direction A pushes it; token mean.

    `clip_range` (A < 0) and `clip_range_high` (A > 0) are the divergence bounds. `ratio_cap` truncates the
    weight (verl's `clip_ratio_c`: 20 is its DPPO code's fallback, but verl's actor config sets 3 by default,
    so a default verl run caps at 3; None: no cap). It reports its masks as the clip counts.
    """

    aggregation = "token_mean"
    advantage_linear = True

    ratio_cap: float | None = param(20.0, optional(positive))

    def keep(self, spec: LossSpec, b: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """`[B, T]` bool pair: the tokens kept for A > 0 and for A <= 0."""
        raise NotImplementedError

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        adv = b.advantages
        keep_pos, keep_neg = self.keep(spec, b)
        keep = torch.where(adv > 0, keep_pos, keep_neg) & b.mask
        weight = (ratio if self.ratio_cap is None else ratio.clamp(max=self.ratio_cap)).detach()
        loss = -weight * adv * b.logps * keep
        return loss, {K.CLIP_LOW: ~keep & (adv < 0) & b.mask, K.CLIP_HIGH: ~keep & (adv > 0) & b.mask}


@torch.no_grad()
def _probs(b: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
    return b.logps.detach().exp(), b.old_logps.exp()


@register_loss
class DPPOTVLoss(DPPOLoss):
    """DPPO-Binary-TV: masked when p - p_old > clip_range_high (A > 0) or < -clip_range (A <= 0)."""

    name = "dppo_tv"

    def keep(self, spec: LossSpec, b: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
        p, p_old = _probs(b)
        return (p - p_old) <= spec.clip_range_high, (p - p_old) >= -spec.clip_range


@register_loss
class DPPOKLLoss(DPPOLoss):
    """DPPO-Binary-KL: masked when KL(Bern(p_old) || Bern(p)) exceeds the bound and p moved with A's sign."""

    name = "dppo_kl"

    def keep(self, spec: LossSpec, b: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            p, p_old = _probs(b)
            q, q_old = -torch.expm1(b.logps.detach()), -torch.expm1(b.old_logps)  # 1 - p, accurate near p = 1
            binary_kl = (
                p_old * (b.old_logps - b.logps.detach()) + torch.xlogy(q_old, q_old) - torch.xlogy(q_old, q)
            )
        return (binary_kl <= spec.clip_range_high) | (p <= p_old), (binary_kl <= spec.clip_range) | (
            p >= p_old
        )


@register_loss
class TOPRLoss(PolicyGradientLoss):
    """TOPR (Le Roux et al., 2025, arXiv 2503.14286, eq. 8): A > 0: -A logp; A <= 0: -sg(clip(pi/mu, 0, 1)) A logp,
    summed over each sequence's tokens, mean over sequences.

    The paper's ratio is the sequence's, exp(sum_t d); `ratio_level="token"` is ROLL's per-token form. The
    split is on the advantage's sign (the paper's on the reward's). `clip_range` is unused.
    """

    name = "topr"
    advantage_linear = True
    aggregation = "seq_sum"
    metric_keys = (TOPR_WEIGHT,)
    clip_sides = ()

    ratio_level: str = param("sequence", one_of(RATIO_LEVELS))

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        d = log_ratio(b).detach()
        if self.ratio_level == "sequence":
            d = seq_ops.per_token(seq_ops.seq_sum(d, b), b).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        weight = torch.where(b.advantages > 0, torch.ones_like(d), d.exp().clamp(max=1.0))
        return -weight * b.advantages * b.logps, {TOPR_WEIGHT: weight}


@register_loss
class KimiLoss(PolicyGradientLoss):
    """Kimi k1.5 (Kimi Team, 2025, arXiv 2501.12599, eq. 3): -A log pi(y) + (tau / 2) (log pi(y) / pi_old(y))^2
    per sequence, mean over sequences.

    The paper's log-ratio is the sequence's, sum_t d; `ratio_level="token"` is ROLL's `kimi15` form (each
    token's d^2). tau 0.1 is ROLL's default (the paper gives none). `clip_range` is unused.
    """

    name = "kimi"
    aggregation = "seq_sum"
    metric_keys = (KIMI_PENALTY,)
    clip_sides = ()

    tau: float = param(0.1, positive)
    ratio_level: str = param("sequence", one_of(RATIO_LEVELS))

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        d = log_ratio(b)
        if self.ratio_level == "sequence":
            penalty = seq_ops.spread(0.5 * self.tau * seq_ops.seq_sum(d, b).square(), b)
        else:
            penalty = 0.5 * self.tau * d.square()
        return -b.advantages * b.logps + penalty, {KIMI_PENALTY: penalty.detach()}
