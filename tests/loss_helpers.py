"""Shared builders for the loss tests: small padded batches with known layouts."""

from __future__ import annotations

import math

import torch

from twinkle_exp.loss import LOSSES

IGN = -100
# The six published losses, which these tests were written for; the zoo's are tested in test_loss_zoo*.py.
ALL_LOSSES = ["bnpo", "cispo", "drgrpo", "grpo", "gspo", "sapo"]
# GVPO compares each sequence with its group (`whole_groups`): its own tests (test_gvpo.py) hold its
# contracts with group indices and whole-group splits; the batteries here call losses without groups.
ZOO_LOSSES = sorted(n for n in set(LOSSES) - set(ALL_LOSSES) if not LOSSES[n].whole_groups)


def make_loss(name: str, **kwargs):
    if name == "drgrpo":
        kwargs.setdefault("max_completion_length", 6)
    return LOSSES[name](**kwargs)


def one_token_batch(ratio: float, advantage: float, dtype=torch.float64):
    """One sequence whose single completion token has ratio `ratio` against old log-prob 0.

    Returns (logps leaf [1, 2] with grad, labels [1, 2], advantages [1], old_logps [1, 2]).
    """
    logps = torch.tensor([[0.0, math.log(ratio)]], dtype=dtype, requires_grad=True)
    labels = torch.tensor([[IGN, 5]])
    return logps, labels, torch.tensor([advantage], dtype=dtype), torch.zeros(1, 2, dtype=dtype)


def random_padded_batch(lengths, prompt_len=2, vocab=11, seed=0, dtype=torch.float64):
    """Right-padded rows: `prompt_len` prompt tokens then `lengths[i]` completion tokens.

    Returns a dict of logits [B, T, V] (leaf, grad), labels [B, T], old/ref log-probs [B, T], advantages [B].
    """
    gen = torch.Generator().manual_seed(seed)
    batch, width = len(lengths), prompt_len + max(lengths)
    labels = torch.full((batch, width), IGN)
    for i, n in enumerate(lengths):
        labels[i, prompt_len : prompt_len + n] = torch.randint(0, vocab, (n,), generator=gen)
    logits = torch.randn(batch, width, vocab, generator=gen, dtype=dtype).requires_grad_(True)
    mask = labels != IGN
    old = (torch.randn(batch, width, generator=gen, dtype=dtype) * 0.3 - 2.4) * mask
    ref = (torch.randn(batch, width, generator=gen, dtype=dtype) * 0.3 - 2.4) * mask
    adv = torch.randn(batch, generator=gen, dtype=dtype)
    return {"logits": logits, "labels": labels, "old_logps": old, "ref_logps": ref, "advantages": adv}
