"""Correction weights for the sampler / trainer mismatch: pure tensor functions, no trainer state.

The sampler (a bf16 copy, vLLM) and the trainer's recomputed old log-probs disagree by 1e-2 to 3e-2 per
token, so the tokens were drawn from `pi_sampler`, not from the `pi_old` the loss's ratio is taken against.
These weights, rho = pi_old / pi_sampler per token (or per sequence), re-weigh the policy term:

    loss_fn(..., old_logps=old, rollout_weights=weights)   # the policy term times weights, token by token

Modes (`ROLLOUT_MODES`):
- "none": every weight 1 (the metrics are still measured).
- "tis": truncated importance sampling, min(rho, upper); `level="token"` rho per token, `"sequence"` the
  product over the sequence's tokens on each of them (TRL, verl, slime; Yao et al., 2025).
- "mis": masked importance sampling (IcePop): rho where low <= rho <= high, else 0 (the token is dropped);
  per token only (`level="sequence"` is refused).
- "seq_mask": 1 for a sequence whose geometric-mean ratio exp(mean_t log rho) lies in [low, high], else 0.
  As `rollout_weights` the rejected sequences stay in the counts and the KL term with a zero policy term;
  as `rollout_mask=weights > 0` they leave the batch, as verl's rejection sampling removes them.
"""

from __future__ import annotations

import torch

from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss.batch import sequence_ids, sequence_starts
from twinkle_exp.loss.core import LOG_RATIO_CLAMP

ROLLOUT_MODES = ("none", "tis", "mis", "seq_mask")
ROLLOUT_LEVELS = ("token", "sequence")


def _per_sequence(values: torch.Tensor, mask: torch.Tensor, position_ids, mean: bool) -> torch.Tensor:
    """`[B, T]` -> `[B, T]`: each token gets its sequence's sum (or mean) of `values` over `mask`."""
    ids, count = sequence_ids(sequence_starts(mask, position_ids))
    total = torch.zeros(count, dtype=values.dtype, device=values.device)
    total = total.index_add(0, ids.reshape(-1), (values * mask).reshape(-1))
    if mean:
        length = torch.bincount(ids[mask], minlength=count).to(values.dtype)
        total = total / length.clamp(min=1)
    return total[ids]


def _check(mode: str, level: str, upper: float, low: float, high: float) -> None:
    if mode not in ROLLOUT_MODES:
        raise ValueError(f"rollout correction mode must be one of {list(ROLLOUT_MODES)}, got {mode!r}")
    if level not in ROLLOUT_LEVELS:
        raise ValueError(f"rollout correction level must be one of {list(ROLLOUT_LEVELS)}, got {level!r}")
    if mode == "mis" and level == "sequence":
        raise ValueError("rollout correction mode=mis is per token: level=sequence applies to tis only")
    if not upper > 0:
        raise ValueError(f"rollout correction upper must be > 0, got {upper:g}")
    if not 0 <= low <= high:
        raise ValueError(f"rollout correction needs 0 <= low <= high, got low={low:g}, high={high:g}")


@torch.no_grad()
def rollout_correction(
    sampler_logps: torch.Tensor,
    old_logps: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str = "none",
    level: str = "token",
    upper: float = 2.0,
    low: float = 0.5,
    high: float = 2.0,
    position_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weights `[B, T]` (0 off the mask, no grad) and the metrics `K.ROLLOUT` for one batch.

    Args:
        sampler_logps: `[B, T]` the sampler's log-probs of the labels, aligned like the loss's `logps`.
        old_logps: `[B, T]` the trainer's recomputed log-probs of the same tokens (the loss's `old_logps`).
        mask: `[B, T]` bool, the completion tokens (`completion_mask(labels, position_ids)`).
        mode, level, upper: see the module docstring; `upper` bounds TIS, `low` / `high` MIS and seq_mask.
        position_ids: `[B, T]` for packed rows (sequences restart at 0), as the loss takes them.
    Returns the weights and `{ratio_mean, ratio_min, ratio_max, masked_fraction}` as float32 scalars; the
    ratio is the one the mode acts on (per token, or the sequence's at `level="sequence"` / `seq_mask`).
    """
    _check(mode, level, upper, low, high)
    for name, t in (("sampler_logps", sampler_logps), ("old_logps", old_logps)):
        if t.shape != mask.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but mask has shape {tuple(mask.shape)}")
    mask = mask.bool()
    log_rho = (old_logps - sampler_logps).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP) * mask
    if mode == "seq_mask":
        log_rho = _per_sequence(log_rho, mask, position_ids, mean=True)
    elif mode == "tis" and level == "sequence":
        log_rho = _per_sequence(log_rho, mask, position_ids, mean=False).clamp(
            -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP
        )
    rho = log_rho.exp()
    if mode == "none":
        weights = torch.ones_like(rho)
    elif mode == "tis":
        weights = rho.clamp(max=upper)
    elif mode == "mis":
        weights = torch.where((rho >= low) & (rho <= high), rho, torch.zeros_like(rho))
    else:
        weights = ((rho >= low) & (rho <= high)).to(rho.dtype)
    weights = weights * mask
    count = mask.sum().clamp(min=1)
    rho_on = rho[mask]
    empty = rho_on.numel() == 0
    metrics = {
        K.ROLLOUT_RATIO_MEAN: (rho * mask).sum() / count,
        K.ROLLOUT_RATIO_MIN: rho.new_tensor(1.0) if empty else rho_on.min(),
        K.ROLLOUT_RATIO_MAX: rho.new_tensor(1.0) if empty else rho_on.max(),
        K.ROLLOUT_MASKED: ((weights == 0) & mask).sum() / count,
    }
    return weights, {key: value.float() for key, value in metrics.items()}
