"""peft's LoRA linear layer computed in fewer passes over its output: the scale on the rank-r product, the
low-rank product accumulated into the base product's own buffer.

peft computes `base(x) + B(A(x)) * scaling`: two elementwise passes over a `[rows, out]` tensor (the scale,
then the sum), each writing a fresh result, and in the backward a third pass (the scale's gradient) and an
autograd sum of the two input gradients. Here the same function is

    out = x W^T (+ b);   out += (s * (x A^T)) B^T          (one GEMM accumulating into the other's output)

with a backward that writes each gradient once: `g_x = g W; g_x += (s * g B) A`. The scale touches only the
`[rows, r]` products. It equals peft's up to float rounding (the order of the products and sums differs).

`fuse_lora_layers` swaps the class of every plain LoRA linear layer of a peft model to `FusedLoraLinear`;
its forward falls back to peft's own wherever the fused one does not apply (adapters disabled or merged,
several adapters, dropout, a LoRA variant such as DoRA, autocast, mixed dtypes), so behaviour is peft's.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn


class _LoraLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,  # [..., in]
        weight: torch.Tensor,  # [out, in] the frozen base weight
        bias: torch.Tensor | None,  # [out]
        lora_a: torch.Tensor,  # [r, in]
        lora_b: torch.Tensor,  # [out, r]
        scaling: float,
    ) -> torch.Tensor:  # [..., out]
        x2 = x.reshape(-1, x.shape[-1])
        h = (x2 @ lora_a.t()).mul_(scaling)  # [rows, r]
        out = torch.addmm(bias, x2, weight.t()) if bias is not None else x2 @ weight.t()
        out.addmm_(h, lora_b.t())
        ctx.save_for_backward(x2, weight, lora_a, lora_b, h)
        ctx.scaling, ctx.x_shape = scaling, x.shape
        return out.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x2, weight, lora_a, lora_b, h = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])  # [rows, out]
        need_x, need_w, need_bias, need_a, need_b, _ = ctx.needs_input_grad
        grad_x = grad_w = grad_bias = grad_a = grad_b = None
        gh = (g @ lora_b).mul_(ctx.scaling)  # [rows, r]: the loss's gradient at s * x A^T, times s
        if need_b:
            grad_b = g.t() @ h
        if need_a:
            grad_a = gh.t() @ x2
        if need_x:
            grad_x = (g @ weight).addmm_(gh, lora_a).view(ctx.x_shape)
        if need_w:
            grad_w = g.t() @ x2
        if need_bias:
            grad_bias = g.sum(0)
        return grad_x, grad_w, grad_bias, grad_a, grad_b, None


@functools.cache
def _fused_class() -> type:
    """`FusedLoraLinear`, built on first use: peft is an optional dependency."""
    from peft.tuners.lora.layer import Linear

    class FusedLoraLinear(Linear):
        """peft's `lora.Linear`, with `_LoraLinearFn` for the one plain adapter it usually runs."""

        def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            adapter = self._fused_adapter(x, args, kwargs)
            if adapter is None:
                return super().forward(x, *args, **kwargs)
            base = self.base_layer
            return _LoraLinearFn.apply(
                x,
                base.weight,
                base.bias,
                self.lora_A[adapter].weight,
                self.lora_B[adapter].weight,
                float(self.scaling[adapter]),
            )

        def _fused_adapter(self, x: torch.Tensor, args: tuple, kwargs: dict) -> str | None:
            """The adapter to run fused, or None where peft's forward must run."""
            if args or kwargs or self.disable_adapters or self.merged or len(self.active_adapters) != 1:
                return None
            adapter = self.active_adapters[0]
            if adapter not in self.lora_A or adapter in self.lora_variant:
                return None
            if (
                not isinstance(self.lora_dropout[adapter], nn.Identity)
                or type(self.base_layer) is not nn.Linear
            ):
                return None
            if torch.is_autocast_enabled(x.device.type):
                return None
            dtype = self.base_layer.weight.dtype
            if x.dtype != dtype or self.lora_A[adapter].weight.dtype != dtype:
                return None
            return adapter

    return FusedLoraLinear


def fuse_lora_layers(model: nn.Module) -> int:
    """Make every plain peft LoRA linear layer of `model` a `FusedLoraLinear`; returns how many.

    Only the class changes (parameters, names, state dict and peft's own methods stay), so a checkpoint and
    `disable_adapter()` work as before.
    """
    from peft.tuners.lora.layer import Linear

    fused = _fused_class()
    count = 0
    for module in model.modules():
        if type(module) is Linear:
            module.__class__ = fused
            count += 1
    return count
