"""The tile loops of `hidden_logprobs`: logits one `[chunk_tokens, chunk_vocab]` tile at a time.

Tiles run over the vocabulary for a chunk of tokens: one matmul against a block of the head's rows runs as
fast as the full matmul, while a few tokens against the whole head repack all of it each call (measured on
CPU: 1.6x slower for 55-token chunks). Forward therefore keeps a running (online) softmax per token: the max
`m` so far, the sum of `exp(x - m)` over the non-label tokens and, when asked, `sum exp(x - m) (x - m)` for the
entropy and `sum exp(x - m) W[j]` for the frozen-head gradient. The label's own term is added at the end,
so `1 - p(label)` comes out as `(sum over the others) / total` rather than as a difference of near-equal
numbers, and a confident token's gradient keeps its precision in bfloat16.

Every tile reuses the same buffers (`chunked_softmax.Buffers`).
"""

from __future__ import annotations

import torch

from twinkle_exp.logprobs.chunked_softmax import Buffers


def _tile_logits(bufs: Buffers, hidden, weight, bias, temperature: float, dtype) -> torch.Tensor:
    """`[r, H] x [v, H] (+ [v])` -> `[r, v]` tempered logits in `dtype`, in buffer "x" (the caller may overwrite).

    The matmul runs in the head's dtype, as `lm_head` would; its result is then widened to `dtype`.
    """
    shape = (hidden.shape[0], weight.shape[0])
    x = bufs.get("x", *shape, dtype)
    z = x if weight.dtype == dtype else bufs.get("z", *shape, weight.dtype)
    if bias is None:
        torch.mm(hidden, weight.t(), out=z)
    else:
        torch.addmm(bias, hidden, weight.t(), out=z)
    if z is not x:
        x.copy_(z)
    return x.div_(temperature) if temperature != 1.0 else x


def _matmul_into(bufs: Buffers, acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """`acc += a @ b` with `acc` `[r, H]` in the compute dtype and `a` `[r, v]`, `b` `[v, H]` in the head's."""
    if acc.dtype == a.dtype:
        acc.addmm_(a, b)
    else:
        acc += torch.mm(a, b, out=bufs.get("product", acc.shape[0], acc.shape[1], a.dtype))


def _label_columns(labels: torch.Tensor, v0: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each token's label (`labels` `[r]`) falls in the tile of columns `v0 .. v0 + width`: the
    column `[r, 1]` (clamped into the tile) and whether it is really there `[r, 1]`. Gathers and scatters at
    the clamped column, masked by the flag, need no host sync (a `nonzero` per tile would stall a GPU)."""
    shifted = labels[:, None] - v0
    inside = (shifted >= 0) & (shifted < width)
    return shifted.clamp(0, width - 1), inside


def _zero_at(x: torch.Tensor, column: torch.Tensor, inside: torch.Tensor) -> None:
    """Set `x[i, column[i]] = 0` where `inside[i]`, leave the other rows as they are.

    `x` `[r, v]`, `column` `[r, 1]` long, `inside` `[r, 1]` bool (from `_label_columns`).
    """
    x.scatter_(1, column, torch.where(inside, 0.0, x.gather(1, column)))


class _OnlineSoftmax:
    """Running softmax statistics of one chunk of `r` tokens, fed one vocabulary tile at a time."""

    def __init__(self, r: int, hidden_size: int, dtype, device, with_entropy: bool, with_direction: bool):
        def zeros(*shape):
            return torch.zeros(shape, dtype=dtype, device=device)

        self.peak = torch.full((r,), float("-inf"), dtype=dtype, device=device)  # [r] max logit so far
        self.picked = zeros(r)  # [r] the label's tempered logit
        self.rest = zeros(r)  # [r] sum exp(x - peak) over non-labels
        self.rest_xlogx = zeros(r) if with_entropy else None  # [r] sum exp(x - peak) (x - peak), non-labels
        self.rest_w = zeros(r, hidden_size) if with_direction else None  # [r, H] sum exp(x_j - peak) W[j]

    def add(self, bufs: Buffers, x: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, v0: int):
        """Fold in tile `x` `[r, v]` (overwritten) of columns `v0 .. v0 + v`; `weight` `[v, H]` their rows."""
        column, inside = _label_columns(labels, v0, x.shape[1])
        self.picked = torch.where(inside[:, 0], x.gather(1, column)[:, 0], self.picked)
        peak = torch.maximum(self.peak, x.amax(-1))
        scale = torch.exp(self.peak - peak)  # rescales the sums kept so far; 0 on the first tile
        u = x.sub_(peak[:, None])
        # the entropy needs u after the exp, so e gets a buffer of its own then
        e = u.exp_() if self.rest_xlogx is None else torch.exp(u, out=bufs.get("e", *u.shape, u.dtype))
        _zero_at(e, column, inside)  # the label's term is added once, at the end
        if self.rest_xlogx is not None:
            _zero_at(u, column, inside)
            # the sum of e * u so far, re-expressed relative to the new peak
            shift = torch.where(self.rest > 0, (self.peak - peak) * self.rest, 0.0)
            self.rest_xlogx = scale * (self.rest_xlogx + shift) + torch.linalg.vecdot(e, u)
        if self.rest_w is not None:
            self.rest_w.mul_(scale[:, None])
            e_head = e if e.dtype == weight.dtype else bufs.get("g", *e.shape, weight.dtype).copy_(e)
            _matmul_into(bufs, self.rest_w, e_head, weight)
        self.rest = scale * self.rest + e.sum(-1)
        self.peak = peak

    def finish(self, label_rows: torch.Tensor | None, temperature: float):
        """-> logps [r], logsumexp [r], entropy [r] or None, direction [r, H] or None.

        `label_rows` `[r, H]`: the head's rows of the labels, for the direction `(onehot - p) @ W / T`.
        """
        label_u = self.picked - self.peak
        label_e = torch.exp(label_u)
        total = self.rest + label_e
        lse = self.peak + total.log()
        entropy = direction = None
        if self.rest_xlogx is not None:
            entropy = total.log() - (self.rest_xlogx + label_e * label_u) / total
        if self.rest_w is not None:
            own = self.rest[:, None] * label_rows.to(total.dtype)
            direction = (own - self.rest_w) / (total[:, None] * temperature)
        return self.picked - lse, lse, entropy, direction


def forward_tiles(
    hidden, weight, bias, labels, temperature, chunk_tokens, chunk_vocab, dtype, with_entropy, with_direction
):
    """hidden [N, H], weight [V, H], bias [V] or None, labels [N] -> logps [N], lse [N], entropy [N] or None,
    direction [N, H] or None (the gradient of logps w.r.t. hidden per unit upstream gradient, frozen head)."""
    n, vocab = hidden.shape[0], weight.shape[0]
    bufs = Buffers(min(n, chunk_tokens) * min(vocab, chunk_vocab), hidden.device)
    outs = []
    for r0 in range(0, n, chunk_tokens):
        h, y = hidden[r0 : r0 + chunk_tokens], labels[r0 : r0 + chunk_tokens]
        stats = _OnlineSoftmax(h.shape[0], h.shape[1], dtype, h.device, with_entropy, with_direction)
        for v0 in range(0, vocab, chunk_vocab):
            w = weight[v0 : v0 + chunk_vocab]
            b = None if bias is None else bias[v0 : v0 + chunk_vocab]
            stats.add(bufs, _tile_logits(bufs, h, w, b, temperature, dtype), w, y, v0)
        outs.append(stats.finish(weight[y] if with_direction else None, temperature))
    if not outs:  # no labelled token
        empty = hidden.new_zeros(0, dtype=dtype)
        direction = hidden.new_zeros(hidden.shape, dtype=dtype) if with_direction else None
        return empty, empty, empty if with_entropy else None, direction
    return tuple(None if parts[0] is None else torch.cat(parts) for parts in zip(*outs, strict=True))


def backward_tiles(
    hidden, weight, bias, labels, lse, grad_logps, temperature, chunk_tokens, chunk_vocab, need
):
    """Gradients w.r.t. hidden [N, H], weight [V, H], bias [V]; `need` says which (None for the others).

    Each tile rebuilds its softmax from the saved `lse` [N]: d logp / d logits = onehot - softmax.
    """
    need_h, need_w, need_b = need
    n, vocab = hidden.shape[0], weight.shape[0]
    dtype = lse.dtype
    bufs = Buffers(min(n, chunk_tokens) * min(vocab, chunk_vocab), hidden.device)
    grad_h = torch.zeros(hidden.shape, dtype=dtype, device=hidden.device) if need_h else None
    grad_w = torch.zeros_like(weight) if need_w else None
    grad_b = torch.zeros(vocab, dtype=dtype, device=weight.device) if need_b else None
    for r0 in range(0, n, chunk_tokens):
        tokens = slice(r0, r0 + chunk_tokens)
        h, y = hidden[tokens], labels[tokens]
        scale = (grad_logps[tokens].to(dtype) / temperature)[:, None]  # [r, 1] each token's chain factor
        for v0 in range(0, vocab, chunk_vocab):
            cols = slice(v0, v0 + chunk_vocab)
            w = weight[cols]
            x = _tile_logits(bufs, h, w, None if bias is None else bias[cols], temperature, dtype)
            x.sub_(lse[tokens, None]).exp_().mul_(-scale)  # -softmax * scale
            column, inside = _label_columns(y, v0, w.shape[0])
            x.scatter_add_(1, column, torch.where(inside, scale, 0.0))  # + onehot * scale
            g = x if x.dtype == weight.dtype else bufs.get("g", *x.shape, weight.dtype).copy_(x)
            if need_w:
                grad_w[cols].addmm_(g.t(), h)
            if need_b:
                grad_b[cols] += x.sum(0)
            if need_h:
                _matmul_into(bufs, grad_h[tokens], g, w)
    return (
        None if grad_h is None else grad_h.to(hidden.dtype),
        grad_w,
        None if grad_b is None else grad_b.to(bias.dtype),
    )
