"""The zoo, REINFORCE family (a stop-gradient weight or none on -A logp): GPG, VESPO, DPPO, TOPR, Kimi k1.5.

Each class is only its difference from `PolicyGradientLoss`: the pipeline's importance weight, objective
(`objectives_zoo.py`) and aggregation, plus its own parameters. Where a paper and a peer's code differ the
paper is followed and the peer's form, when it is a one-liner, is a parameter; the docstrings say which.
"""

from __future__ import annotations

from typing import Any

from twinkle_exp.loss.params import non_negative, one_of, optional, param, positive
from twinkle_exp.loss.variants import PolicyGradientLoss, _loss_dataclass, register_loss

RATIO_LEVELS = ("sequence", "token")


@register_loss
class GPGLoss(PolicyGradientLoss):
    """GPG (Chu et al., 2025, arXiv 2504.02546): -A logp with no importance ratio and no clip, token mean.

    GPG's other parts (its advantage without std and the valid-sample rescaling) are advantage estimators,
    not the loss. `clip_range` is unused.
    """

    name = "gpg"
    objective = "reinforce"
    aggregation = "token_mean"


@register_loss
class VESPOLoss(PolicyGradientLoss):
    """VESPO (arXiv 2602.10693), as TRL 1.16's `loss_type="vespo"`: -sg(phi(w)) A logp, token mean, with
    w = exp(sum_t d) the sequence's (unnormalised) ratio and phi(w) = w^k exp(lambda (1 - w)), phi(1) = 1;
    (k, lambda) = (k_pos, lambda_pos) for A >= 0, (k_neg, lambda_neg) otherwise. `clip_range` is unused.
    """

    name = "vespo"
    objective = "vespo"
    aggregation = "token_mean"

    k_pos: float = param(2.0, non_negative)
    lambda_pos: float = param(3.0, positive)
    k_neg: float = param(3.0, non_negative)
    lambda_neg: float = param(2.0, positive)

    def _extra_spec(self) -> dict[str, Any]:
        keys = ("k_pos", "lambda_pos", "k_neg", "lambda_neg")
        return {"options": {k: getattr(self, k) for k in keys}}


@_loss_dataclass  # a dataclass, so its field reaches the two registered subclasses
class _DPPOLoss(PolicyGradientLoss):
    """DPPO (Qi et al., 2026, arXiv 2602.04879): REINFORCE with a stop-gradient ratio weight, masked where the
    policy left a divergence trust region in the direction A pushes it; token mean.

    `clip_range` (A < 0) and `clip_range_high` (A > 0) are the divergence bounds. `ratio_cap` truncates the
    weight (verl's `clip_ratio_c`, 20 there; None: no cap).
    """

    aggregation = "token_mean"

    ratio_cap: float | None = param(20.0, optional(positive))

    def _extra_spec(self) -> dict[str, Any]:
        return {"options": {"ratio_cap": self.ratio_cap}}


@register_loss
class DPPOTVLoss(_DPPOLoss):
    """DPPO-Binary-TV: masked when p - p_old > clip_range_high (A > 0) or < -clip_range (A <= 0)."""

    name = "dppo_tv"
    objective = "dppo_tv"


@register_loss
class DPPOKLLoss(_DPPOLoss):
    """DPPO-Binary-KL: masked when KL(Bern(p_old) || Bern(p)) exceeds the bound and p moved with A's sign."""

    name = "dppo_kl"
    objective = "dppo_kl"


@register_loss
class TOPRLoss(PolicyGradientLoss):
    """TOPR (Le Roux et al., 2025, arXiv 2503.14286, eq. 8): A > 0: -A logp; A <= 0: -sg(clip(pi/mu, 0, 1)) A logp,
    summed over each sequence's tokens, mean over sequences.

    The paper's ratio is the sequence's, exp(sum_t d); `ratio_level="token"` is ROLL's per-token form. The
    split is on the advantage's sign (the paper's on the reward's). `clip_range` is unused.
    """

    name = "topr"
    objective = "topr"
    aggregation = "seq_sum"

    ratio_level: str = param("sequence", one_of(RATIO_LEVELS))

    def _extra_spec(self) -> dict[str, Any]:
        return {"options": {"ratio_level": self.ratio_level}}


@register_loss
class KimiLoss(PolicyGradientLoss):
    """Kimi k1.5 (Kimi Team, 2025, arXiv 2501.12599, eq. 3): -A log pi(y) + (tau / 2) (log pi(y) / pi_old(y))^2
    per sequence, mean over sequences.

    The paper's log-ratio is the sequence's, sum_t d; `ratio_level="token"` is ROLL's `kimi15` form (each
    token's d^2). tau 0.1 is ROLL's default (the paper gives none). `clip_range` is unused.
    """

    name = "kimi"
    objective = "kimi"
    aggregation = "seq_sum"

    tau: float = param(0.1, positive)
    ratio_level: str = param("sequence", one_of(RATIO_LEVELS))

    def _extra_spec(self) -> dict[str, Any]:
        return {"options": {"tau": self.tau, "ratio_level": self.ratio_level}}
