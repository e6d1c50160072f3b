"""The zoo, clipped-ratio family: DAPO, GSPO-token, LUSPO, GMPO, Clip-Cov, KL-Cov (docs/losses.md).

Each class is only its difference from `PolicyGradientLoss`: the pipeline's importance weight, objective
(`objectives_zoo.py`) and aggregation, plus its own parameters. Where a paper and a peer's code differ the
paper is followed and the peer's form, when it is a one-liner, is a parameter; the docstrings say which.
"""

from __future__ import annotations

from typing import Any

from twinkle_exp.loss.params import finite, fraction, non_negative, optional, param, positive
from twinkle_exp.loss.variants import PolicyGradientLoss, register_loss


@register_loss
class DAPOLoss(PolicyGradientLoss):
    """DAPO (Yu et al., 2025, arXiv 2503.14476): clip-higher (0.2 / 0.28), token mean over the whole step.

    The loss side only; DAPO's dynamic sampling and overlong shaping belong to the sampler and the reward.
    """

    name = "dapo"
    aggregation = "token_mean"

    clip_range_high: float | None = param(0.28, optional(positive))


@register_loss
class GSPOTokenLoss(PolicyGradientLoss):
    """GSPO-token (Zheng et al., 2025, arXiv 2507.18071, sec. 4.3): s_i,t = sg(s_i) pi_t / sg(pi_t).

    Its value is GSPO's sequence ratio, its gradient each token's own, so per-token advantages act per token;
    with one advantage per sequence it equals GSPO.
    """

    name = "gspo_token"
    importance = "sequence_token"


@register_loss
class LUSPOLoss(PolicyGradientLoss):
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
    per sequence, mean over sequences (as verl's `geo_mean`).
    """

    name = "gmpo"
    objective = "gmpo"

    clip_range: float = param(0.4, positive)


@register_loss
class ClipCovLoss(PolicyGradientLoss):
    """Clip-Cov (Cui et al., 2025, arXiv 2505.22617): PPO clip, and the gradient of `clip_cov_ratio` x N
    tokens, drawn at random (torch's global RNG) among those the clip left alone whose centred covariance
    (A - mean A)(logp - mean logp) lies in (clip_cov_lb, clip_cov_ub), is detached. Token mean.

    The means and the draw are over the tokens of one call, as in verl (a micro-batch there too).
    """

    name = "clip_cov"
    objective = "clip_cov"
    aggregation = "token_mean"

    clip_cov_ratio: float = param(2e-4, fraction)
    clip_cov_lb: float = param(1.0, finite)
    clip_cov_ub: float = param(5.0, finite)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.clip_cov_lb >= self.clip_cov_ub:
            raise ValueError(
                f"clip_cov_lb ({self.clip_cov_lb:g}) must be < clip_cov_ub ({self.clip_cov_ub:g})"
            )

    def _extra_spec(self) -> dict[str, Any]:
        keys = ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub")
        return {"options": {k: getattr(self, k) for k in keys}}


@register_loss
class KLCovLoss(PolicyGradientLoss):
    """KL-Cov (Cui et al., 2025, arXiv 2505.22617): -A r on every token (no clip), plus kl_cov_coef |d| on the
    top `kl_cov_ratio` share of tokens by centred covariance. Token mean.

    The KL term is |log pi - log pi_old|, as in the authors' and verl's code. Selection is per call.
    """

    name = "kl_cov"
    objective = "kl_cov"
    aggregation = "token_mean"

    kl_cov_ratio: float = param(2e-4, fraction)
    kl_cov_coef: float = param(1.0, non_negative)

    def _extra_spec(self) -> dict[str, Any]:
        return {"options": {"kl_cov_ratio": self.kl_cov_ratio, "kl_cov_coef": self.kl_cov_coef}}
