"""Per-token log-probabilities from logits without a full float32 log-softmax copy.

`log_softmax(logits.float())` followed by `gather` materialises a `[B, T, V]` float32 tensor, and autograd
keeps it alive until backward: for a 150k vocabulary that dominates the memory of an RL step. Here the
log-prob of the chosen token is `logit[label] - logsumexp(logits)`, computed in chunks of rows, and backward
rebuilds the softmax one chunk at a time, so the only full-size tensor is the gradient itself, in the
logits' own dtype.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100
DEFAULT_CHUNK_TOKENS = 1024


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # float64 stays float64 so gradcheck can test the function; everything else is computed in float32.
    return torch.float64 if dtype == torch.float64 else torch.float32


class _SelectiveLogSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, temperature: float, chunk: int):
        # logits [N, V], labels [N] (valid indices only) -> logps [N] in the compute dtype
        dtype = _compute_dtype(logits.dtype)
        out = torch.empty(logits.shape[0], dtype=dtype, device=logits.device)
        lse = torch.empty_like(out)
        for start in range(0, logits.shape[0], chunk):
            rows = slice(start, start + chunk)
            x = logits[rows].to(dtype) / temperature
            lse[rows] = torch.logsumexp(x, dim=-1)
            out[rows] = x.gather(-1, labels[rows, None]).squeeze(-1) - lse[rows]
        ctx.save_for_backward(logits, labels, lse)
        ctx.temperature = temperature
        ctx.chunk = chunk
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        logits, labels, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for start in range(0, logits.shape[0], ctx.chunk):
            rows = slice(start, start + ctx.chunk)
            x = logits[rows].to(lse.dtype) / ctx.temperature
            g = grad_out[rows, None].to(lse.dtype)
            # d/dx (x[label] - logsumexp(x)) = onehot(label) - softmax(x), then the 1/temperature chain factor
            chunk_grad = -torch.exp(x - lse[rows, None]) * g
            chunk_grad.scatter_add_(-1, labels[rows, None], g)
            grad[rows] = (chunk_grad / ctx.temperature).to(logits.dtype)
        return grad, None, None, None


def selective_log_softmax(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
) -> torch.Tensor:
    """Log-prob of `labels` under `softmax(logits / temperature)`, position by position.

    Args:
        logits: `[..., V]` scores, any float dtype.
        labels: `[...]` token ids; `IGNORE_INDEX` (-100) positions get log-prob 0.
        temperature: divides the logits, as the sampler did.
        chunk_tokens: rows processed at once; bounds the float32 working memory to `chunk_tokens x V`.

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
    logps = _SelectiveLogSoftmax.apply(flat_logits, flat_labels, float(temperature), int(chunk_tokens))
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
    logits: torch.Tensor, *, temperature: float = 1.0, chunk_tokens: int = DEFAULT_CHUNK_TOKENS
) -> torch.Tensor:
    """Entropy of `softmax(logits / temperature)` per position, `[..., V]` -> `[...]` float32, no grad."""
    flat = logits.reshape(-1, logits.shape[-1])
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)
    for start in range(0, flat.shape[0], chunk_tokens):
        x = flat[start : start + chunk_tokens].float() / temperature
        logp = torch.log_softmax(x, dim=-1)
        out[start : start + chunk_tokens] = -(logp.exp() * logp).sum(-1)
    return out.reshape(logits.shape[:-1])
