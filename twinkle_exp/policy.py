"""Policies: a model and its tokenizer, built from `conf/policy/`, and their per-token log-probs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from twinkle_exp.loss import shift_logits_to_labels, token_entropy
from twinkle_exp.models import CharTokenizer, TinyCausalLM, Tokenizer, load_hf_causal_lm


@dataclass
class Policy:
    model: nn.Module
    tokenizer: Tokenizer


def tiny_policy(
    d_model: int = 128, n_layers: int = 2, n_heads: int = 4, max_seq_len: int = 64, dropout: float = 0.0
) -> Policy:
    """The built-in character-level transformer, randomly initialised (seed torch first).

    These defaults are the built-in policy's (and `policy=tiny`'s, whose schema is derived from them).
    """
    tokenizer = CharTokenizer()
    model = TinyCausalLM(
        tokenizer.vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        max_seq_len=max_seq_len,
        dropout=dropout,
    )
    return Policy(model, tokenizer)


def hf_policy(name_or_path: str, dtype: str = "float32", trust_remote_code: bool = False) -> Policy:
    """Any `transformers` causal LM with its tokenizer, from a local directory or a hub id."""
    model, tokenizer = load_hf_causal_lm(name_or_path, dtype=dtype, trust_remote_code=trust_remote_code)
    return Policy(model, tokenizer)


# conf/policy/<name>.yaml options, by name; their schemas are derived from these signatures.
POLICIES = {"tiny": tiny_policy, "hf": hf_policy}


def sequence_logps(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    labels: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of `labels` (aligned with them) and, optionally, the policy's entropy at those positions.

    Args:
        input_ids, attention_mask, position_ids, labels: `[B, T]`, as a `RolloutBatch` holds them.
    Returns:
        logps `[B, T]` float32 with grad, 0 off the labels; entropy `[B, T]` (no grad) or None.
    """
    logits = model(input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    logps = shift_logits_to_labels(logits, labels, temperature=temperature)
    entropy = None
    if with_entropy:
        entropy = torch.nn.functional.pad(token_entropy(logits[:, :-1], temperature=temperature), (1, 0))
    return logps, entropy
