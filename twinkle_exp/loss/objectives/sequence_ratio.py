"""The sequence-ratio family: one importance ratio per sequence (or its value on each token) instead of each
token's own. GSPO, GSPO-token and LUSPO put it into PPO's clip (`clipped.ClippedRatioLoss`); GMPO takes the
geometric mean of the token ratios, clipped in log space. Notation as in `clipped`.
"""

from __future__ import annotations

import torch

from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss import seq_ops
from twinkle_exp.loss.base import PolicyGradientLoss
from twinkle_exp.loss.batch import TokenBatch
from twinkle_exp.loss.core import LossSpec, log_ratio
from twinkle_exp.loss.objectives.clipped import ClippedRatioLoss
from twinkle_exp.loss.params import one_of, param, positive
from twinkle_exp.loss.registry import register_loss

WEIGHT_MEANS = ("geometric", "arithmetic")  # how GMPO takes a sequence's rollout-correction weights


@register_loss
class GSPOLoss(ClippedRatioLoss):
    """GSPO (Zheng et al., 2025): one length-normalised ratio per sequence, clipped; sequences weigh the same."""

    name = "gspo"
    importance = "sequence"


@register_loss
class GSPOTokenLoss(ClippedRatioLoss):
    """GSPO-token (Zheng et al., 2025, arXiv 2507.18071, sec. 4.3): s_i,t = sg(s_i) pi_t / sg(pi_t).

    Its value is GSPO's sequence ratio, its gradient each token's own, so per-token advantages act per token;
    with one advantage per sequence it equals GSPO.
    """

    name = "gspo_token"
    importance = "sequence_token"


@register_loss
class LUSPOLoss(ClippedRatioLoss):
    """LUSPO (arXiv 2602.05261): GSPO's clipped sequence loss scaled by the sequence's length, mean over sequences.

    Written as the sum of GSPO's per-token loss over the step divided by the number of sequences, which is
    TRL 1.16's `loss_type="luspo"` (`(per-sequence loss x length).mean()`).
    """

    name = "luspo"
    importance = "sequence"
    aggregation = "seq_sum"


@register_loss
class GMPOLoss(PolicyGradientLoss):
    """GMPO (Zhao et al., 2025, arXiv 2507.20673): the geometric mean of the token ratios, clipped per token in
    log space and sign-aware, -A_i exp(mean_t sgn(A) min(sgn(A) d_t, sgn(A) clip(d_t, -lo, hi))).

    Here `clip_range` / `clip_range_high` bound the log-ratio d, the paper's (e^-0.4, e^0.4): 0.4. One value
    per sequence, mean over sequences (as verl's `geo_mean`). It reports its own (log-space) clip counts.

    The switches' token masks go inside the mean: it is over the tokens they keep (TRL's `GMPOTrainer` with
    `top_entropy_quantile`), so a dropped token gets no gradient; a sequence with none kept adds 0. The
    rollout-correction weights rho_t scale each sequence by their mean over the same tokens:
    `rollout_weight_mean="geometric"` (verl's `geo_mean`, exp(mean_t log(rho_t + 1e-10)); the default,
    the same mean GMPO takes of the ratios, so the weights and the ratio combine into the geometric mean of
    pi / pi_sampler) or "arithmetic".
    """

    name = "gmpo"
    advantage_linear = True
    applies_rollout_weights = True
    applies_policy_keep = True

    clip_range: float = param(0.4, positive)
    rollout_weight_mean: str = param("geometric", one_of(WEIGHT_MEANS))

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        d = log_ratio(b)
        adv = b.advantages
        sign = torch.sign(adv)
        clipped = d.clamp(-spec.clip_range, spec.clip_range_high)
        # For A > 0 only a rise above hi is cut off, for A < 0 only a fall below -lo: the pessimistic bound.
        d_min = sign * torch.minimum(sign * d, sign * clipped)
        keep = b.mask if b.policy_keep is None else b.policy_keep
        kept = seq_ops.seq_sum(keep.to(d.dtype), b)
        seq_ratio = torch.exp(seq_ops.seq_sum(d_min * keep, b) / kept.clamp(min=1))
        seq_adv = seq_ops.seq_mean(adv, b)
        seq_loss = -seq_adv * seq_ratio * (kept > 0)
        if b.weights is not None:
            if self.rollout_weight_mean == "geometric":
                seq_weight = torch.exp(
                    seq_ops.seq_sum(torch.log(b.weights + 1e-10) * keep, b) / kept.clamp(min=1)
                )
            else:
                seq_weight = seq_ops.seq_sum(b.weights * keep, b) / kept.clamp(min=1)
            seq_loss = seq_loss * seq_weight
        loss = seq_ops.per_token(seq_loss, b)
        dd = d.detach()
        return loss, {
            K.CLIP_LOW: (dd < -spec.clip_range) & (adv < 0),
            K.CLIP_HIGH: (dd > spec.clip_range_high) & (adv > 0),
        }
