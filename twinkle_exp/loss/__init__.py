"""GRPO-family policy-gradient losses on one shared pipeline (see the README's loss table)."""

from twinkle_exp.loss import metric_keys
from twinkle_exp.loss.batch import completion_mask
from twinkle_exp.loss.core import OBJECTIVES, LossOutput, LossSpec, compute_loss, derived_clip_metrics
from twinkle_exp.loss.hidden_logprobs import hidden_log_probs, shift_hidden_to_labels
from twinkle_exp.loss.kl import KL_ESTIMATORS, kl_penalty
from twinkle_exp.loss.logprobs import (
    IGNORE_INDEX,
    selective_log_softmax,
    shift_logits_to_labels,
    token_entropy,
)
from twinkle_exp.loss.params import param
from twinkle_exp.loss.protocol import LossFn
from twinkle_exp.loss.rollout_correction import ROLLOUT_MODES, rollout_correction
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
    register_loss,
)
from twinkle_exp.loss.zoo import ClipCovLoss, DAPOLoss, GMPOLoss, GSPOTokenLoss, KLCovLoss, LUSPOLoss
from twinkle_exp.loss.zoo_reinforce import DPPOKLLoss, DPPOTVLoss, GPGLoss, KimiLoss, TOPRLoss, VESPOLoss

__all__ = [
    "IGNORE_INDEX",
    "KL_ESTIMATORS",
    "LOSSES",
    "OBJECTIVES",
    "ROLLOUT_MODES",
    "BNPOLoss",
    "ClipCovLoss",
    "DAPOLoss",
    "DPPOKLLoss",
    "DPPOTVLoss",
    "GMPOLoss",
    "GPGLoss",
    "GSPOTokenLoss",
    "KLCovLoss",
    "KimiLoss",
    "LUSPOLoss",
    "TOPRLoss",
    "VESPOLoss",
    "CISPOLoss",
    "DRGRPOLoss",
    "GRPOLoss",
    "GSPOLoss",
    "LossFn",
    "LossOutput",
    "LossSpec",
    "PolicyGradientLoss",
    "SAPOLoss",
    "completion_mask",
    "compute_loss",
    "derived_clip_metrics",
    "get_loss_class",
    "hidden_log_probs",
    "kl_penalty",
    "metric_keys",
    "param",
    "register_loss",
    "rollout_correction",
    "selective_log_softmax",
    "shift_hidden_to_labels",
    "shift_logits_to_labels",
    "token_entropy",
]
