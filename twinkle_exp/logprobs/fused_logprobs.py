"""The tile loops of `hidden_logprobs` with the Triton epilogues of `fused_kernels.py` (backend "triton").

Same tiles, same statistics and same signatures as `hidden_chunks.forward_tiles` / `backward_tiles`, so
the autograd function swaps one pair for the other. Per `[chunk_tokens, chunk_vocab]` tile:

- forward: one cuBLAS matmul into a reused tile in the head's dtype (no float32 copy of it), one kernel;
  with a frozen head one more matmul, `rest_w = rescale * rest_w + exp_tile @ W_tile`;
- backward: the matmul again (the tile is rebuilt once), one kernel that turns it into its gradient in
  place, then the matmuls for the hidden states' and the head's gradients (the bias's is a column sum).

The matmuls run in the head's dtype with float32 accumulation across tiles, as in the PyTorch path.
"""

from __future__ import annotations

import torch

from twinkle_exp.logprobs.chunked_softmax import Buffers
from twinkle_exp.logprobs.fused_kernels import backward_tile, forward_tile


def _tile(bufs: Buffers, hidden, weight, bias) -> torch.Tensor:
    """`[r, H] x [v, H] (+ [v])` -> `[r, v]` logits in the head's dtype, untempered, in a reused buffer."""
    z = bufs.get("z", hidden.shape[0], weight.shape[0], weight.dtype)
    if bias is None:
        return torch.mm(hidden, weight.t(), out=z)
    return torch.addmm(bias, hidden, weight.t(), out=z)


def _add_product(bufs: Buffers, acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """`acc += a @ b`: `acc` float32 `[r, H]`, `a` `[r, v]` and `b` `[v, H]` in the head's dtype."""
    if acc.dtype == a.dtype:
        acc.addmm_(a, b)
    else:
        acc += torch.mm(a, b, out=bufs.get("product", acc.shape[0], acc.shape[1], a.dtype))


def _finish(stats: dict, rest_w, label_rows, temperature: float):
    """Running statistics `[r]` -> logps, logsumexp, entropy or None, direction `[r, H]` or None."""
    label_u = stats["picked"] - stats["peak"]
    label_e = torch.exp(label_u)
    total = stats["rest"] + label_e
    lse = stats["peak"] + total.log()
    entropy = direction = None
    if stats["xlogx"] is not None:
        entropy = total.log() - (stats["xlogx"] + label_e * label_u) / total
    if rest_w is not None:
        own = stats["rest"][:, None] * label_rows.to(total.dtype)
        direction = (own - rest_w) / (total[:, None] * temperature)
    return stats["picked"] - lse, lse, entropy, direction


def forward_tiles(
    hidden, weight, bias, labels, temperature, chunk_tokens, chunk_vocab, dtype, with_entropy, with_direction
):
    """hidden [N, H], weight [V, H], bias [V] or None, labels [N] -> logps [N], lse [N], entropy [N] or None,
    direction [N, H] or None (the gradient of logps w.r.t. hidden per unit upstream gradient, frozen head)."""
    if dtype != torch.float32:  # float64 (gradcheck) stays on the PyTorch path (`tile_backend`)
        raise ValueError(f"the triton tile loops compute in float32, got {dtype}")
    n, vocab = hidden.shape[0], weight.shape[0]
    bufs = Buffers(min(n, chunk_tokens) * min(vocab, chunk_vocab), hidden.device)
    outs = []
    for r0 in range(0, n, chunk_tokens):
        h, y = hidden[r0 : r0 + chunk_tokens], labels[r0 : r0 + chunk_tokens].contiguous()
        r = h.shape[0]
        stats = {
            "peak": torch.full((r,), float("-inf"), dtype=dtype, device=h.device),
            "picked": torch.zeros(r, dtype=dtype, device=h.device),
            "rest": torch.zeros(r, dtype=dtype, device=h.device),
            "xlogx": torch.zeros(r, dtype=dtype, device=h.device) if with_entropy else None,
            "rescale": torch.empty(r, dtype=dtype, device=h.device) if with_direction else None,
        }
        rest_w = torch.zeros(r, h.shape[1], dtype=dtype, device=h.device) if with_direction else None
        for v0 in range(0, vocab, chunk_vocab):
            w = weight[v0 : v0 + chunk_vocab]
            z = _tile(bufs, h, w, None if bias is None else bias[v0 : v0 + chunk_vocab])
            forward_tile(z, y, v0, temperature, stats, with_direction)
            if with_direction:
                rest_w.mul_(stats["rescale"][:, None])
                _add_product(bufs, rest_w, z, w)
        outs.append(_finish(stats, rest_w, weight[y] if with_direction else None, temperature))
    if not outs:  # no labelled token
        empty = hidden.new_zeros(0, dtype=dtype)
        direction = hidden.new_zeros(hidden.shape, dtype=dtype) if with_direction else None
        return empty, empty, empty if with_entropy else None, direction
    return tuple(None if parts[0] is None else torch.cat(parts) for parts in zip(*outs, strict=True))


def backward_tiles(
    hidden, weight, bias, labels, lse, grad_logps, temperature, chunk_tokens, chunk_vocab, need
):
    """Gradients w.r.t. hidden [N, H], weight [V, H], bias [V]; `need` says which (None for the others)."""
    need_h, need_w, need_b = need
    n, vocab = hidden.shape[0], weight.shape[0]
    dtype = lse.dtype
    bufs = Buffers(min(n, chunk_tokens) * min(vocab, chunk_vocab), hidden.device)
    grad_h = torch.zeros(hidden.shape, dtype=dtype, device=hidden.device) if need_h else None
    grad_w = torch.zeros_like(weight) if need_w else None
    grad_b = torch.zeros(vocab, dtype=dtype, device=weight.device) if need_b else None
    # the upstream gradient of a sum is an expanded (stride 0) tensor; the kernel reads a dense one
    coefs = (grad_logps.to(dtype) / temperature).contiguous()
    for r0 in range(0, n, chunk_tokens):
        tokens = slice(r0, r0 + chunk_tokens)
        h, y = hidden[tokens], labels[tokens].contiguous()
        for v0 in range(0, vocab, chunk_vocab):
            cols = slice(v0, v0 + chunk_vocab)
            w = weight[cols]
            g = _tile(bufs, h, w, None if bias is None else bias[cols])
            backward_tile(g, y, v0, temperature, lse[tokens], coefs[tokens])
            if need_w:
                grad_w[cols].addmm_(g.t(), h)
            if need_b:
                grad_b[cols] += g.sum(0, dtype=dtype)
            if need_h:
                _add_product(bufs, grad_h[tokens], g, w)
    return (
        None if grad_h is None else grad_h.to(hidden.dtype),
        grad_w,
        None if grad_b is None else grad_b.to(bias.dtype),
    )
