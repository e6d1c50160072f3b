"""Per-sequence reductions over the `[B, T]` token layout (padded rows or packed ones alike).

Every sequence-level quantity (GSPO's ratio, the off-policy mask, a sequence's loss) goes through these, so
a packed row and the padded batch give the same sequences in the same order.
"""

from __future__ import annotations

import torch

from twinkle_exp.loss.batch import TokenBatch


def seq_sum(values: torch.Tensor, b: TokenBatch) -> torch.Tensor:
    """`[B, T]` -> `[num_seqs]`: the sum of `values` over each sequence's completion tokens."""
    out = torch.zeros(b.num_seqs, dtype=values.dtype, device=values.device)
    return out.index_add(0, b.seq_ids.reshape(-1), (values * b.mask).reshape(-1))


def seq_len(b: TokenBatch, dtype: torch.dtype) -> torch.Tensor:
    """`[num_seqs]` completion tokens per sequence (0 for a sequence without any)."""
    return torch.bincount(b.seq_ids[b.mask], minlength=b.num_seqs).to(dtype)


def seq_mean(values: torch.Tensor, b: TokenBatch) -> torch.Tensor:
    """`[B, T]` -> `[num_seqs]`: the token mean over each sequence (0 for an empty one)."""
    return seq_sum(values, b) / seq_len(b, values.dtype).clamp(min=1)


def per_token(seq_values: torch.Tensor, b: TokenBatch) -> torch.Tensor:
    """`[num_seqs]` -> `[B, T]`: each sequence's value on each of its tokens."""
    return seq_values[b.seq_ids]


def spread(seq_values: torch.Tensor, b: TokenBatch) -> torch.Tensor:
    """`[num_seqs]` -> `[B, T]` whose sum over a sequence's tokens is its value (a sequence-level loss term)."""
    return (seq_values / seq_len(b, seq_values.dtype).clamp(min=1))[b.seq_ids]


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)
