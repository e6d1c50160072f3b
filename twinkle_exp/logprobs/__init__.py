"""Per-token log-probabilities and entropies of the labels, from logits or from hidden states, in chunks that
never hold a `[B, T, V]` float32 copy (the Triton tiles optional). The loss library scores what these give."""

from twinkle_exp.logprobs.hidden_logprobs import hidden_log_probs, shift_hidden_to_labels
from twinkle_exp.logprobs.logits import (
    IGNORE_INDEX,
    selective_log_softmax,
    shift_logits_to_labels,
    token_entropy,
)

__all__ = [
    "IGNORE_INDEX",
    "hidden_log_probs",
    "selective_log_softmax",
    "shift_hidden_to_labels",
    "shift_logits_to_labels",
    "token_entropy",
]
