"""Builders for the zoo's tests: a float64 batch of log-prob leaves and its sequences written out one by one.

The reference formulas in the tests read `Seq` objects (1-D tensors per sequence, sliced from the same
leaves), never the library's `[B, T]` layout helpers, so a layout bug cannot hide in both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

IGN = -100
PROMPT = 2


@dataclass
class Seq:
    logp: torch.Tensor  # [n] current log-probs (a view of the leaf, with grad)
    old: torch.Tensor  # [n]
    ref: torch.Tensor  # [n]
    adv: torch.Tensor  # [n] the advantage of each token
    entropy: torch.Tensor  # [n]


def zoo_batch(lengths, seed=0, spread=0.4, per_token_adv=False):
    """Right-padded rows of `PROMPT` prompt tokens then `lengths[i]` completion tokens.

    Returns (inputs for the loss: logps leaf [B, T], labels, old_logps, ref_logps, advantages, entropies;
    the list of `Seq`). Old log-probs sit `spread`-noise away from the current ones, so ratios fall on both
    sides of every clip.
    """
    gen = torch.Generator().manual_seed(seed)
    batch, width = len(lengths), PROMPT + max(lengths)
    labels = torch.full((batch, width), IGN)
    mask = torch.zeros(batch, width, dtype=torch.bool)
    for i, n in enumerate(lengths):
        labels[i, PROMPT : PROMPT + n] = torch.randint(0, 7, (n,), generator=gen)
        mask[i, PROMPT : PROMPT + n] = True
    logp = (-torch.rand(batch, width, generator=gen, dtype=torch.float64) * 3 - 0.05) * mask
    logps = logp.clone().requires_grad_(True)
    old = (logp + spread * torch.randn(batch, width, generator=gen, dtype=torch.float64)).clamp(
        max=-1e-3
    ) * mask
    ref = (logp + 0.3 * torch.randn(batch, width, generator=gen, dtype=torch.float64)) * mask
    entropies = torch.rand(batch, width, generator=gen, dtype=torch.float64) * 2 * mask
    if per_token_adv:
        adv = torch.randn(batch, width, generator=gen, dtype=torch.float64) * mask
    else:
        adv = torch.randn(batch, generator=gen, dtype=torch.float64)
    inputs = {
        "logps": logps,
        "labels": labels,
        "old_logps": old,
        "ref_logps": ref,
        "advantages": adv,
        "entropies": entropies,
    }
    seqs = []
    for i, n in enumerate(lengths):
        cols = slice(PROMPT, PROMPT + n)
        a = adv[i, cols] if per_token_adv else adv[i].expand(n)
        seqs.append(Seq(logps[i, cols], old[i, cols], ref[i, cols], a, entropies[i, cols]))
    return inputs, seqs
