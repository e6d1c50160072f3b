"""Per-token log-probabilities from logits without a full float32 log-softmax copy.

`log_softmax(logits.float())` followed by `gather` materialises a `[B, T, V]` float32 tensor, and autograd
keeps it alive until backward: for a 150k vocabulary that dominates the memory of an RL step. Here the
log-prob of the chosen token is `logit[label] - logsumexp(logits)`, computed in chunks of rows in one reused
float32 buffer, and backward rebuilds the softmax one chunk at a time, so the only full-size tensor is the
gradient itself, in the logits' own dtype. When the logits need not exist at all, `hidden_log_probs` starts
from the hidden states instead.
"""

from __future__ import annotations

import torch

from twinkle_exp.logprobs.chunked_softmax import Buffers, chunk_elements, compute_dtype, exp_shifted_

IGNORE_INDEX = -100


def _rows_per_chunk(chunk_tokens: int | None, vocab: int, device: torch.device) -> int:
    if chunk_tokens is None:
        return max(1, chunk_elements(device) // vocab)
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    return int(chunk_tokens)


def _load(bufs: Buffers, logits, rows: slice, temperature: float, dtype, into=None) -> torch.Tensor:
    """The chunk `logits[rows]` `[c, V]` divided by the temperature, in `into` or the reused buffer."""
    chunk = logits[rows]
    x = bufs.get("x", chunk.shape[0], chunk.shape[1], dtype) if into is None else into
    x.copy_(chunk)
    return x.div_(temperature) if temperature != 1.0 else x


class _SelectiveLogSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, temperature: float, chunk: int):
        # logits [N, V], labels [N] (valid indices only) -> logps [N] in the compute dtype
        dtype = compute_dtype(logits.dtype)
        out = torch.empty(logits.shape[0], dtype=dtype, device=logits.device)
        lse = torch.empty_like(out)
        bufs = Buffers(min(chunk, logits.shape[0]) * logits.shape[1], logits.device)
        for start in range(0, logits.shape[0], chunk):
            rows = slice(start, start + chunk)
            x = _load(bufs, logits, rows, temperature, dtype)
            picked = x.gather(-1, labels[rows, None]).squeeze(-1)
            peak, total = exp_shifted_(x)
            lse[rows] = peak + total.log()
            out[rows] = picked - lse[rows]
        ctx.save_for_backward(logits, labels, lse)
        ctx.temperature = temperature
        ctx.chunk = chunk
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        logits, labels, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        bufs = Buffers(min(ctx.chunk, logits.shape[0]) * logits.shape[1], logits.device)
        for start in range(0, logits.shape[0], ctx.chunk):
            rows = slice(start, start + ctx.chunk)
            # float32 logits: compute straight in the gradient's rows, with no copy at the end
            into = grad[rows] if grad.dtype == lse.dtype else None
            x = _load(bufs, logits, rows, ctx.temperature, lse.dtype, into)
            g = (grad_out[rows].to(lse.dtype) / ctx.temperature)[:, None]
            # d/dx (x[label] - logsumexp(x)) = onehot(label) - softmax(x), then the 1/temperature chain factor
            x.sub_(lse[rows, None]).exp_().mul_(-g).scatter_add_(-1, labels[rows, None], g)
            if into is None:
                grad[rows] = x
        return grad, None, None, None


def selective_log_softmax(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_tokens: int | None = None,
) -> torch.Tensor:
    """Log-prob of `labels` under `softmax(logits / temperature)`, position by position.

    Args:
        logits: `[..., V]` scores, any float dtype.
        labels: `[...]` token ids; `IGNORE_INDEX` (-100) positions get log-prob 0.
        temperature: divides the logits, as the sampler did.
        chunk_tokens: rows processed at once (default: `chunk_elements / V`, a 32 MiB float32 chunk, 128
            MiB on a GPU); bounds the working memory to `chunk_tokens x V` float32 elements.

    Returns:
        `[...]` log-probs in float32 (float64 for float64 logits), differentiable w.r.t. `logits`.
    """
    if logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} disagree on [..., T]"
        )
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    valid = labels != IGNORE_INDEX
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_labels = torch.where(valid, labels, 0).reshape(-1)
    chunk = _rows_per_chunk(chunk_tokens, logits.shape[-1], logits.device)
    logps = _SelectiveLogSoftmax.apply(flat_logits, flat_labels, float(temperature), chunk)
    return logps.reshape(labels.shape).masked_fill(~valid, 0.0)


def shift_logits_to_labels(logits: torch.Tensor, labels: torch.Tensor, **kwargs) -> torch.Tensor:
    """Log-probs aligned with unshifted labels: `out[:, t]` = log p(labels[:, t] | tokens < t).

    `logits[:, t]` predicts token `t + 1`, so position 0 has no prediction and gets 0 (callers mask it).

    Args:
        logits: `[B, T, V]`; labels: `[B, T]`. Returns `[B, T]`.
    """
    shifted = selective_log_softmax(logits[:, :-1], labels[:, 1:], **kwargs)
    return torch.nn.functional.pad(shifted, (1, 0), value=0.0)


@torch.no_grad()
def token_entropy(
    logits: torch.Tensor, *, temperature: float = 1.0, chunk_tokens: int | None = None
) -> torch.Tensor:
    """Entropy of `softmax(logits / temperature)` per position, `[..., V]` -> `[...]` float32, no grad."""
    flat = logits.reshape(-1, logits.shape[-1])
    chunk = _rows_per_chunk(chunk_tokens, flat.shape[1], flat.device)
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)
    bufs = Buffers(min(chunk, flat.shape[0]) * flat.shape[1], logits.device)
    for start in range(0, flat.shape[0], chunk):
        rows = slice(start, start + chunk)
        u = _load(bufs, flat, rows, temperature, torch.float32)
        u.sub_(u.amax(-1, keepdim=True))
        e = torch.exp(u, out=bufs.get("e", *u.shape, u.dtype))
        total = e.sum(-1)
        # H = -sum p log p with p = e / total and log p = u - log(total)
        out[rows] = total.log() - torch.linalg.vecdot(e, u) / total
    return out.reshape(logits.shape[:-1])
