"""A policy's per-token log-probs (and entropy) of given labels: the passes every stage of training shares."""

from __future__ import annotations

import torch
from torch import nn

from twinkle_exp.logprobs import (
    IGNORE_INDEX,
    hidden_log_probs,
    shift_hidden_to_labels,
    shift_logits_to_labels,
    token_entropy,
)
from twinkle_exp.models.backbone import call_as_forward, hidden_states_and_head, output_head
from twinkle_exp.models.hf import grouped_query_sdpa
from twinkle_exp.policy.shared_prefix import SharedPrefix, shared_hidden_states, should_share


def sequence_logps(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    labels: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    prefix: SharedPrefix | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of `labels` (aligned with them) and, optionally, the policy's entropy at those positions.

    Computed from the final hidden states and the output head (`hidden_log_probs`), so the `[B, T, V]`
    logits never exist; models whose logits are not `head(hidden)` (see `models/backbone.py`) take the
    logits path instead, with the same results. With a `prefix` (`PrefixIndex.for_rows`), rows that share
    their prompt run it through the model once (`shared_prefix`), where the model allows.

    Args:
        input_ids, attention_mask, position_ids, labels: `[B, T]`, as a `RolloutBatch` holds them.
        entropy_grad: the entropy with its gradient (an entropy bonus); this takes the logits path, which
            holds the `[B, T, V]` logits and their gradient, and shares no prompt.
    Returns:
        logps `[B, T]` float32 with grad, 0 off the labels; entropy `[B, T]` (no grad unless
        `entropy_grad`, 0 off the labels) or None.
    """
    with grouped_query_sdpa(input_ids.device):
        return _sequence_logps(
            model,
            input_ids,
            attention_mask,
            position_ids,
            labels,
            temperature,
            with_entropy,
            entropy_grad,
            prefix,
        )


def _sequence_logps(
    model, input_ids, attention_mask, position_ids, labels, temperature, with_entropy, entropy_grad, prefix
):
    if entropy_grad:
        return _with_entropy_grad(model, input_ids, attention_mask, position_ids, labels, temperature)
    if should_share(model, prefix):
        args = (input_ids, attention_mask, position_ids, labels, temperature, with_entropy, prefix)
        return call_as_forward(model, _from_shared_prefix, *args)
    if output_head(model) is not None:
        args = (input_ids, attention_mask, position_ids, labels, temperature, with_entropy)
        return call_as_forward(model, _from_hidden_states, *args)
    logits = model(input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    logps = shift_logits_to_labels(logits, labels, temperature=temperature)
    entropy = None
    if with_entropy:
        entropy = torch.nn.functional.pad(token_entropy(logits[:, :-1], temperature=temperature), (1, 0))
        entropy = entropy.masked_fill(labels == IGNORE_INDEX, 0.0)
    return logps, entropy


def _with_entropy_grad(model, input_ids, attention_mask, position_ids, labels, temperature):
    """`sequence_logps` with a differentiable entropy, both from one log-softmax of the full logits (float32,
    or float64 for a float64 model); the four tensors are `[B, T]`."""
    logits = model(input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    dtype = torch.promote_types(logits.dtype, torch.float32)
    logp = torch.log_softmax(logits[:, :-1].to(dtype) / temperature, dim=-1)  # [B, T - 1, V]
    targets = labels[:, 1:]
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    pad = torch.nn.functional.pad
    off = labels == IGNORE_INDEX
    logps = pad(picked.masked_fill(targets == IGNORE_INDEX, 0.0), (1, 0)).masked_fill(off, 0.0)
    entropy = pad(-(logp.exp() * logp).sum(-1), (1, 0)).masked_fill(off, 0.0)
    return logps, entropy


def _from_hidden_states(model, input_ids, attention_mask, position_ids, labels, temperature, with_entropy):
    """`sequence_logps` for a model with a plain head; the four tensors are `[B, T]`."""
    hidden, head = hidden_states_and_head(model, input_ids, attention_mask, position_ids)
    return shift_hidden_to_labels(
        hidden, head.weight, labels, bias=head.bias, temperature=temperature, with_entropy=with_entropy
    )


def _from_shared_prefix(
    model, input_ids, attention_mask, position_ids, labels, temperature, with_entropy, prefix
):
    """`sequence_logps` running each distinct prefix once; the four tensors are `[B, T]`."""
    hidden = shared_hidden_states(model, input_ids, attention_mask, position_ids, prefix)
    head = output_head(model)
    logps, entropy = hidden_log_probs(
        hidden,
        head.weight,
        labels[:, prefix.width :],
        bias=head.bias,
        temperature=temperature,
        with_entropy=with_entropy,
    )
    pad = torch.nn.functional.pad
    return pad(logps, (prefix.width, 0)), None if entropy is None else pad(entropy, (prefix.width, 0))
