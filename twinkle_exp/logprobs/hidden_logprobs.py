"""Per-token log-probs from final hidden states and the output head, never holding `[tokens, V]` logits.

`lm_head(hidden)` then a log-softmax materialises `[N, V]` logits, a float32 copy and their gradient: with a
152k vocabulary that is gigabytes per few thousand tokens. Here (the technique of Liger-Kernel's fused linear
losses, in plain PyTorch) the logits exist one `[chunk_tokens, chunk_vocab]` tile at a time
(`hidden_chunks.py`):

- forward keeps, per token, `logsumexp` (saved for backward, `[N]`), the label's log-prob, the entropy if
  asked and, with a frozen head (LoRA, or a head that is not trained), the gradient w.r.t. the hidden state
  per unit of upstream gradient, `(onehot - softmax) @ W / T` (`[N, H]`): backward is then one product;
- with a trainable head, backward recomputes each tile's logits, rebuilds its softmax from `logsumexp`, and
  writes the head's gradient block by block (one rounding per token chunk, also in bfloat16) while
  accumulating the hidden states' gradient. That is one matmul more than the logits path (4 instead of 3).

With `backend="triton"` (CUDA, Triton installed) each tile's elementwise work runs as one kernel
(`fused_logprobs`, chosen by `tile_backend`); "auto" keeps the PyTorch ops until the kernels pass their GPU
timing (`tile_backend.FUSED_BY_DEFAULT`).
"""

from __future__ import annotations

import torch

from twinkle_exp.logprobs.chunked_softmax import chunk_elements, compute_dtype
from twinkle_exp.logprobs.logits import IGNORE_INDEX
from twinkle_exp.logprobs.tile_backend import BACKENDS, tile_loops

DEFAULT_CHUNK_TOKENS = 4096


class _HiddenLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, temperature, chunks, with_entropy, tiles):
        # hidden [N, H], weight [V, H], bias [V] or None, labels [N] valid ids, chunks (tokens, vocab),
        # tiles: the module with the tile loops (`hidden_chunks`, or `fused_logprobs`'s Triton kernels)
        # -> logps [N] and entropy [N] (or [0] when not asked), in the compute dtype
        need = ctx.needs_input_grad[:3]
        # A frozen head: the gradient w.r.t. the hidden states is grad_logp * direction, known in forward.
        precompute = need[0] and not (need[1] or need[2])
        dtype = compute_dtype(hidden.dtype)
        with torch.autocast(hidden.device.type, enabled=False):
            logps, lse, entropy, direction = tiles.forward_tiles(
                hidden, weight, bias, labels, temperature, *chunks, dtype, with_entropy, precompute
            )
        ctx.save_for_backward(hidden, weight, bias, labels, lse, direction)
        ctx.temperature, ctx.chunks, ctx.precompute, ctx.tiles = temperature, chunks, precompute, tiles
        entropy = logps.new_empty(0) if entropy is None else entropy
        ctx.mark_non_differentiable(entropy)
        return logps, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logps, _grad_entropy):
        hidden, weight, bias, labels, lse, direction = ctx.saved_tensors
        if ctx.precompute:
            grads = ((grad_logps[:, None] * direction).to(hidden.dtype), None, None)
        else:
            with torch.autocast(hidden.device.type, enabled=False):
                grads = ctx.tiles.backward_tiles(
                    hidden,
                    weight,
                    bias,
                    labels,
                    lse,
                    grad_logps,
                    ctx.temperature,
                    *ctx.chunks,
                    ctx.needs_input_grad[:3],
                )
        return (*grads, None, None, None, None, None)


def _matmul_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    # Under autocast the head would run in the autocast dtype; the chunks do the same, explicitly.
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    if hidden.dtype != weight.dtype:
        raise ValueError(f"hidden ({hidden.dtype}) and weight ({weight.dtype}) must share a dtype")
    return hidden.dtype


def hidden_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    chunk_vocab: int | None = None,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of `labels` under `softmax((hidden @ weight.T + bias) / temperature)`, position by position.

    Args:
        hidden: `[..., H]` final hidden states (after the last norm), any float dtype.
        weight: `[V, H]` the output projection (`lm_head.weight`, the embedding matrix when tied).
        labels: `[...]` token ids; `IGNORE_INDEX` (-100) positions are skipped and get 0.
        bias: `[V]` the output projection's bias, if it has one.
        temperature: divides the logits, as the sampler did.
        with_entropy: also return the entropy of the tempered distribution (no gradient).
        chunk_tokens, chunk_vocab: the tile of logits computed at once; `chunk_vocab` defaults to
            `chunk_elements / min(tokens, chunk_tokens)` columns, a 32 MiB float32 tile (128 MiB on a GPU).
        backend: who does each tile's elementwise work: "torch" (PyTorch ops, `hidden_chunks`), "triton"
            (one fused kernel per tile, `fused_logprobs`; needs triton and a CUDA device, or
            `TRITON_INTERPRET=1` on CPU) or "auto" (torch; triton on CUDA once `tile_backend.FUSED_BY_DEFAULT`).

    Returns:
        logps `[...]` float32 (float64 for float64 inputs), differentiable w.r.t. hidden, weight and bias;
        entropy `[...]` (no gradient, 0 off the labels) or None.
    """
    if hidden.shape[:-1] != labels.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} and labels {tuple(labels.shape)} disagree on [...]")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1]:
        raise ValueError(f"weight must be [V, {hidden.shape[-1]}], got {tuple(weight.shape)}")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(f"bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    if chunk_vocab is not None and chunk_vocab < 1:
        raise ValueError(f"chunk_vocab must be >= 1, got {chunk_vocab}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    dtype = _matmul_dtype(hidden, weight)
    tiles = tile_loops(backend, hidden.device, dtype)
    valid = labels != IGNORE_INDEX
    h = hidden[valid].to(dtype)  # [N, H] only the positions that have a label
    w, b = weight.to(dtype), None if bias is None else bias.to(dtype)
    if chunk_vocab is None:
        chunk_vocab = max(1, chunk_elements(h.device) // max(1, min(h.shape[0], chunk_tokens)))
    chunks = (int(chunk_tokens), int(chunk_vocab))
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (h, w, b)):
        logps, entropy = _HiddenLogProbs.apply(
            h, w, b, labels[valid], float(temperature), chunks, with_entropy, tiles
        )
    else:  # no graph: nothing to save for backward
        with torch.autocast(h.device.type, enabled=False):
            logps, _, entropy, _ = tiles.forward_tiles(
                h,
                w,
                b,
                labels[valid],
                float(temperature),
                *chunks,
                compute_dtype(dtype),
                with_entropy,
                False,
            )
    out = torch.zeros(labels.shape, dtype=logps.dtype, device=logps.device).masked_scatter(valid, logps)
    if not with_entropy:
        return out, None
    return out, torch.zeros_like(out).masked_scatter(valid, entropy)


def shift_hidden_to_labels(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, **kwargs
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`hidden_log_probs` aligned with unshifted labels: `out[:, t]` = log p(labels[:, t] | tokens < t).

    `hidden[:, t]` predicts token `t + 1`, so position 0 has no prediction and gets 0.

    Args:
        hidden: `[B, T, H]`; weight: `[V, H]`; labels: `[B, T]`. Returns `[B, T]` logps and entropy (or None).
    """
    logps, entropy = hidden_log_probs(hidden[:, :-1], weight, labels[:, 1:], **kwargs)
    pad = torch.nn.functional.pad
    return pad(logps, (1, 0)), None if entropy is None else pad(entropy, (1, 0))
