"""Model FLOPs of an RL update and this machine's own float32 matmul rate, for `real_step`'s fraction.

Only the weight matmuls count (attention's score and value products are ~1% at this project's sequences
of a few dozen tokens, and everything elementwise is overhead, not model FLOPs). A weight `[out, in]` costs
2 x in x out FLOPs per token forward; backward costs as much again for the activations' gradient and again
for the weight's own gradient when it is trained. So a trained weight costs 6 x its parameters per token,
a frozen one that gradients flow through (a LoRA base weight, the head under LoRA) 4 x, and a pass without
gradient (the old log-probs' recompute) 2 x. The trunk (decoder layers) and the head run on different
tokens: with prompt sharing (`policy/shared_prefix.py`) each group's prompt goes through the trunk once,
and the head scores the labelled positions only (`loss/hidden_logprobs.py`).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class MatmulParams:
    """Parameters of the weights that matmuls touch."""

    trunk: int  # the decoder layers' linear weights (LoRA: their frozen base weights)
    head: int  # the output head, the embedding matrix when tied (the lookup itself is no matmul)
    adapters: int = 0  # LoRA A and B matrices, trained


@dataclass
class TokenCounts:
    """Token positions an update computed, as its passes really ran them."""

    trunk: int = 0  # rows x columns through the decoder, with gradient
    head: int = 0  # labelled positions scored by the head, with gradient
    trunk_no_grad: int = 0  # the same without gradient (old log-probs recomputed in the update)
    head_no_grad: int = 0


def update_flops(params: MatmulParams, tokens: TokenCounts, full: bool) -> float:
    """Model FLOPs of an update: 6 x params x tokens for trained weights, 4 x for frozen ones that the
    gradient passes through (`full=False`: LoRA), 2 x for the passes without gradient."""
    base = 6 if full else 4
    trained = base * (params.trunk * tokens.trunk + params.head * tokens.head)
    adapters = 6 * params.adapters * tokens.trunk
    no_grad = 2 * (
        (params.trunk + params.adapters) * tokens.trunk_no_grad + params.head * tokens.head_no_grad
    )
    return float(trained + adapters + no_grad)


def matmul_params(decoder: nn.Module, head: nn.Linear) -> MatmulParams:
    """`MatmulParams` of a transformers decoder (`model.get_decoder()`, LoRA layers in place) and its head."""
    trunk = adapters = 0
    for name, module in decoder.named_modules():
        if isinstance(module, nn.Linear):
            if "lora_" in name:  # peft's lora_A / lora_B (its lora.Linear wrapper is no nn.Linear)
                adapters += module.weight.numel()
            else:
                trunk += module.weight.numel()
    return MatmulParams(trunk=trunk, head=head.weight.numel(), adapters=adapters)


def matmul_rate(m: int, k: int, n: int, repeats: int = 5, min_seconds: float = 0.1) -> float:
    """This process's float32 FLOP/s on `[m, k] @ [k, n]` at the current thread count: the median of
    `repeats` timings, each of as many products as fill `min_seconds`."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    torch.mm(a, b, out=out)  # warm-up
    start, iters = time.perf_counter(), 0
    while time.perf_counter() - start < min_seconds:
        torch.mm(a, b, out=out)
        iters += 1
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            torch.mm(a, b, out=out)
        seconds.append(time.perf_counter() - start)
    return 2.0 * m * k * n * iters / statistics.median(seconds)


# Products a profile records, with where their two operands sit in the recorded input shapes.
_PRODUCT_OPERANDS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::addmm_": (1, 2)}


@dataclass
class Products:
    """One class of a profile's matrix products: their FLOPs (2 m k n each), own seconds and calls."""

    flops: float = 0.0
    seconds: float = 0.0
    calls: int = 0


def profiled_products(events, vocab: int, rank: int | None) -> dict[str, Products]:
    """A profile's matrix products (`key_averages(group_by_input_shape=True)` of one recorded with
    `record_shapes=True`) by class: `head` (a side of `vocab`), `low-rank` (a side of the adapters' `rank`: the
    LoRA products, bound by memory more than by FLOPs) and `weights` (the rest). FLOPs come from the shapes,
    so in-place products, which the profiler gives none, count too."""
    classes: dict[str, Products] = {}
    for event in events:
        operands = _PRODUCT_OPERANDS.get(event.key)
        if operands is None or not event.input_shapes:
            continue
        (m, k), (_, n) = (event.input_shapes[i] for i in operands)
        kind = "head" if vocab in (m, k, n) else "low-rank" if rank in (m, k, n) else "weights"
        cls = classes.setdefault(kind, Products())
        cls.flops += 2.0 * m * k * n * event.count
        cls.seconds += event.self_cpu_time_total / 1e6
        cls.calls += event.count
    return classes
