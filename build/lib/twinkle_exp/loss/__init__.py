"""GRPO-family policy-gradient losses on one shared pipeline (see the README's loss table)."""

from twinkle_exp.loss import metric_keys
from twinkle_exp.loss.core import LossOutput, LossSpec, compute_loss
from twinkle_exp.loss.kl import KL_ESTIMATORS, kl_penalty
from twinkle_exp.loss.logprobs import (
    IGNORE_INDEX,
    selective_log_softmax,
    shift_logits_to_labels,
    token_entropy,
)
from twinkle_exp.loss.variants import (
    LOSSES,
    BNPOLoss,
    CISPOLoss,
    DRGRPOLoss,
    GRPOLoss,
    GSPOLoss,
    PolicyGradientLoss,
    SAPOLoss,
    get_loss_class,
)

__all__ = [
    "IGNORE_INDEX",
    "KL_ESTIMATORS",
    "LOSSES",
    "BNPOLoss",
    "CISPOLoss",
    "DRGRPOLoss",
    "GRPOLoss",
    "GSPOLoss",
    "LossOutput",
    "LossSpec",
    "PolicyGradientLoss",
    "SAPOLoss",
    "compute_loss",
    "get_loss_class",
    "kl_penalty",
    "metric_keys",
    "selective_log_softmax",
    "shift_logits_to_labels",
    "token_entropy",
]
