"""A LoRA policy as a plain model with its adapters merged into the weights, for passes without gradient.

A decoding step of a LoRA model runs every adapted layer as three products and two elementwise passes
(`x W^T + s (x A^T) B^T`); the merged model runs one, `x (W + s B A)^T`. `MergedCopy` keeps that model beside
the policy: the adapted layers' merged weights are its own (`[out, in]` each, the trunk's size in memory),
every other parameter and buffer (embeddings, norms, head) is the policy's own tensor, shared. `refresh`
rewrites the merged weights from the policy's current ones, one `addmm` per layer, so the copy computes the
policy's function up to float rounding (the product's order differs), never one of an older step.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from twinkle_exp.models.backbone import unwrap_peft


def _lora_layers(model: nn.Module) -> dict[str, nn.Module]:
    """`{qualified name: peft LoRA linear layer}` of `model`'s underlying model."""
    from peft.tuners.lora.layer import Linear

    return {name: m for name, m in unwrap_peft(model).named_modules() if isinstance(m, Linear)}


def can_merge(model: nn.Module) -> bool:
    """Whether `model` is a peft model whose LoRA layers are all plain linear layers with one vanilla adapter."""
    if not hasattr(model, "disable_adapter") or any(_is_sharded(p) for p in model.parameters()):
        return False  # FSDP's shards are not whole weights to merge
    try:
        layers = _lora_layers(model)
    except ImportError:
        return False
    return bool(layers) and all(
        type(m.base_layer) is nn.Linear and len(m.lora_A) == 1 and not m.lora_variant for m in layers.values()
    )


def _is_sharded(p: torch.Tensor) -> bool:
    return type(p).__name__ == "DTensor" or type(getattr(p, "data", None)).__name__ == "DTensor"


class MergedCopy:
    """`refresh(policy)` returns the plain model computing `policy`'s function with merged adapters."""

    def __init__(self) -> None:
        self._model: nn.Module | None = None
        self._pairs: list[tuple[nn.Module, nn.Linear]] = []  # (the policy's LoRA layer, the copy's linear)

    def _build(self, policy: nn.Module) -> None:
        base = unwrap_peft(policy)
        layers = _lora_layers(policy)
        # Every tensor shared, so that deepcopy copies only the modules; the merged layers replace the LoRA ones.
        memo = {id(t): t for t in (*base.parameters(), *base.buffers())}
        model = copy.deepcopy(base, memo)
        self._pairs = []
        for name, lora in layers.items():
            linear = lora.base_layer
            merged = nn.Linear(
                linear.in_features, linear.out_features, bias=False, device=linear.weight.device
            )
            merged.weight = nn.Parameter(torch.empty_like(linear.weight), requires_grad=False)
            merged.bias = linear.bias  # shared
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, merged)
            self._pairs.append((lora, merged))
        self._model = model.eval()

    @torch.no_grad()
    def refresh(self, policy: nn.Module) -> nn.Module:
        if self._model is None:
            self._build(policy)
        for lora, merged in self._pairs:
            (adapter,) = lora.lora_A.keys()
            base = lora.base_layer.weight  # [out, in]
            b, a = lora.lora_B[adapter].weight, lora.lora_A[adapter].weight  # [out, r], [r, in]
            if lora.disable_adapters or lora.merged or adapter not in lora.active_adapters:
                merged.weight.copy_(base)
            else:
                torch.addmm(base, b, a, alpha=float(lora.scaling[adapter]), out=merged.weight)
        return self._model.eval()
