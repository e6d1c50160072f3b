"""The update's AdamW: torch's per-parameter loop, or (`optim.fused_adamw`) its fused kernel.

On CPU the loop runs about ten tensor ops per parameter, each dispatched from Python; the fused kernel
does the same arithmetic in one pass per parameter (what that buys:
docs/performance.md, "Seconds per RL step"), but rounds differently (weights differ by ~1e-8 after 30 steps
on the built-in policy), and over a run that moves the figures: the default run's final greedy accuracy
was 76.6% with it, 75.4% without. So it is opt-in, and the default stays bitwise what it was.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from twinkle_exp.config.schema import OptimConfig

# Where torch (>= 2.4) has fused AdamW kernels for plain float tensors.
_FUSED_DEVICES = ("cpu", "cuda")


def fused_applies(params: list[torch.Tensor], loss_scaler: object | None) -> bool:
    """Whether the fused kernel can take `params`: plain (not sharded) float tensors on one device type
    that has the kernel, and no AMP loss scaler (which would hand the kernel its own scale)."""
    if loss_scaler is not None or not params:
        return False
    kinds = {p.device.type for p in params}
    return (
        len(kinds) == 1
        and kinds <= set(_FUSED_DEVICES)
        and all(type(p) in (torch.Tensor, torch.nn.Parameter) and p.is_floating_point() for p in params)
    )


def adamw(
    params: Iterable[torch.Tensor],
    *,
    lr: float,
    betas: tuple[float, float],
    weight_decay: float,
    fused: bool = False,
    loss_scaler: object | None = None,
) -> torch.optim.AdamW:
    """`torch.optim.AdamW` over `params`; with `fused`, the fused kernel where `fused_applies`."""
    params = list(params)
    fused = fused and fused_applies(params, loss_scaler)
    return torch.optim.AdamW(
        params, lr=lr, betas=betas, weight_decay=weight_decay, fused=True if fused else None
    )


def optimizer_and_schedule(
    params: Iterable[torch.Tensor], opt: OptimConfig, loss_scaler: object | None = None
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """The update's AdamW of `opt` and its linear warm-up over `opt.warmup_steps` optimizer steps."""
    optimizer = adamw(
        params,
        lr=opt.lr,
        betas=tuple(opt.betas),
        weight_decay=opt.weight_decay,
        fused=opt.fused_adamw,
        loss_scaler=loss_scaler,
    )
    warmup = max(1, opt.warmup_steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    return optimizer, schedule
