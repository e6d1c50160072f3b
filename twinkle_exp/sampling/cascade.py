"""Decoding attention that reads each prompt's keys and values once per group (cascade attention).

A rollout decodes `group_size` samples of every prompt. With an ordinary KV cache each row holds its own copy
of its prompt's keys and values, and every decoding step reads all of them: `group_size` copies of the same
numbers, in memory and in time (at the default sampling benchmark the attention kernel was a third of the
sampler's time, cProfile). Here the prompt's keys and values stay as the prefill computed them, one copy per
group (`[groups, kv_heads, P, head_dim]`), and only the completion's go into per-row buffers. Each step
attends in two parts: the group's rows, stacked as queries, against their prompt, and each row against its
own completion so far; the two softmaxes are merged through their maxima and sums, which gives the softmax
over the whole row (as vLLM's cascade attention and FlashInfer's shared-prefix decoding do).

Only transformers models whose attention layers dispatch through `AttentionInterface` and pass a call's
keyword arguments down to it, with plain causal attention (no sliding window, no soft-capping), take this
path: `supported` names them. During decoding the model's `_attn_implementation` is switched to this
function (and restored afterwards); the model gets no KV cache and no mask, and the function keeps the
keys and values itself.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from twinkle_exp.models.backbone import has_sliding_window, unwrap_peft

NAME = "twinkle_cascade"
# Model types whose attention has been checked to dispatch as the module doc says (tests/test_cascade.py).
_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")


def supported(model: nn.Module) -> bool:
    """Whether `generate` can decode `model` with cascade attention."""
    config = getattr(unwrap_peft(model), "config", None)
    if getattr(config, "model_type", None) not in _MODEL_TYPES:
        return False
    if getattr(config, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False  # flash attention and others: leave the user's choice alone
    return not has_sliding_window(model)


class CascadeCache:
    """The prompts' keys and values once per group, and each row's completion so far.

    Rows start as `groups x group_size`, group `g` in rows `g * group_size ..`; `keep` drops finished rows
    (and groups left without rows), keeping the others in order. `length` completion positions are filled.
    `prefix_bias` is added to the prompt's attention scores: 0 on its tokens, -inf on the left padding. The
    completion needs no mask: a row attends only to its own completion, and once a row has ended (its later
    tokens are padding) nothing it computes is used.
    """

    def __init__(
        self,
        prefix: list[tuple[torch.Tensor, torch.Tensor]],  # per layer (keys, values) [groups, kv, P, d]
        prompt_mask: torch.Tensor,  # [groups, P] 1 on prompt tokens, 0 on left padding
        group_size: int,
        capacity: int,  # completion positions to make room for
    ):
        self.prefix = prefix
        groups, kv_heads, _, head_dim = prefix[0][0].shape
        rows = groups * group_size
        self.length = 0
        like = prefix[0][0]
        self.prefix_bias = _bias(prompt_mask.bool())[:, None, None, :]  # [groups, 1, 1, P] float32
        self.keys = [like.new_empty(rows, kv_heads, capacity, head_dim) for _ in prefix]
        self.values = [like.new_empty(rows, kv_heads, capacity, head_dim) for _ in prefix]
        self._place(torch.arange(groups, device=like.device).repeat_interleave(group_size))

    def _place(self, group: torch.Tensor) -> None:
        """Lay the rows out for the prompt's attention, from `group` `[rows]` long, each row's group (an
        index into `prefix`, non-decreasing): `slot` `[rows]`, each row's place in `groups x width`.

        Once rows have ended, groups keep different numbers of rows. Each group's rows are padded to the
        fullest group's count (`width`) rather than each row given its group's prompt keys: that gather
        would copy `rows x P` keys in every layer at every step, the copies this attention exists to avoid,
        while the padding costs only the padded queries' share of the prompt's (small) attention.
        """
        counts = torch.bincount(group)  # [groups]
        first = counts.cumsum(0) - counts  # [groups] each group's first row
        rank = torch.arange(len(group), device=group.device) - first[group]  # [rows] place in its group
        self.width = int(counts.max())
        self.group, self.slot = group, group * self.width + rank

    def keep(self, index: torch.Tensor) -> None:
        """Keep only the rows `index` `[rows']` long, increasing, of the current rows; drop empty groups."""
        self.keys = [k.index_select(0, index) for k in self.keys]
        self.values = [v.index_select(0, index) for v in self.values]
        present, group = torch.unique_consecutive(self.group.index_select(0, index), return_inverse=True)
        if len(present) < len(self.prefix_bias):
            self.prefix = [(k.index_select(0, present), v.index_select(0, present)) for k, v in self.prefix]
            self.prefix_bias = self.prefix_bias.index_select(0, present)
        self._place(group)

    @classmethod
    def from_prefill(
        cls,
        cache: Any,  # a transformers Cache of the distinct prompts, `[D, kv, P, d]` per layer
        group_prompt: torch.Tensor,  # [groups] long: the distinct prompt of each group
        prompt_mask: torch.Tensor,  # [groups, P]
        group_size: int,
        capacity: int,
    ) -> CascadeCache:
        layers = getattr(cache, "layers", None)
        if not layers or any(getattr(layer, "keys", None) is None for layer in layers):
            raise TypeError(
                f"cascade attention needs a cache with keys per layer, got {type(cache).__name__}"
            )
        if torch.equal(group_prompt, torch.arange(len(group_prompt), device=group_prompt.device)):
            prefix = [(layer.keys, layer.values) for layer in layers]
        else:
            prefix = [(layer.keys[group_prompt], layer.values[group_prompt]) for layer in layers]
        return cls(prefix, prompt_mask, group_size, capacity)

    def attend(self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float):
        """query `[rows, heads, 1, d]`, this step's key and value `[rows, kv, 1, d]` -> `[rows, heads, d]`."""
        rows, heads, _, head_dim = query.shape
        kv_heads, g, groups = key.shape[1], self.width, len(self.prefix_bias)
        rep = heads // kv_heads
        if self.length == self.keys[layer].shape[2]:
            raise RuntimeError(f"cascade cache full: {self.length} completion positions")
        self.keys[layer][:, :, self.length] = key[:, :, 0]
        self.values[layer][:, :, self.length] = value[:, :, 0]
        # 16-bit models attend in float32, as the fused kernels do inside: a bfloat16 score would be off by
        # up to 0.4% of its size before the exp.
        dtype = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
        # Head h reads key/value head h // rep (transformers' repeat_kv).
        q = query.reshape(rows, kv_heads, rep, head_dim).to(dtype)
        # The prompt, once per group: the group's rows (padded to `width`) x rep heads are its queries.
        padded = q.new_zeros(groups * g, kv_heads, rep, head_dim).index_copy_(0, self.slot, q)
        stacked = (
            padded.view(groups, g, kv_heads, rep, head_dim)
            .transpose(1, 2)
            .reshape(groups, kv_heads, g * rep, -1)
        )
        prefix_keys, prefix_values = (t.to(dtype) for t in self.prefix[layer])
        scores = torch.matmul(stacked, prefix_keys.transpose(-1, -2)).mul_(scale).add_(self.prefix_bias)
        prefix_out, prefix_max, prefix_sum = _partial_softmax(scores, prefix_values)
        prefix_out, prefix_max, prefix_sum = (
            t.view(groups, kv_heads, g, rep, -1)
            .transpose(1, 2)
            .reshape(groups * g, kv_heads, rep, -1)
            .index_select(0, self.slot)
            for t in (prefix_out, prefix_max, prefix_sum)
        )
        # Each row's own completion, this step's token included.
        filled = self.length + 1
        own_keys, own_values = (t[layer][:, :, :filled].to(dtype) for t in (self.keys, self.values))
        scores = torch.matmul(q, own_keys.transpose(-1, -2)).mul_(scale)
        own_out, own_max, own_sum = _partial_softmax(scores, own_values)
        peak = torch.maximum(prefix_max, own_max)
        prefix_weight, own_weight = torch.exp(prefix_max - peak), torch.exp(own_max - peak)
        out = (prefix_out * prefix_weight + own_out * own_weight) / (
            prefix_sum * prefix_weight + own_sum * own_weight
        )
        return out.reshape(rows, heads, head_dim).to(query.dtype)


def _bias(attend: torch.Tensor) -> torch.Tensor:
    return torch.zeros(attend.shape, device=attend.device).masked_fill(~attend, float("-inf"))


def _partial_softmax(scores: torch.Tensor, values: torch.Tensor):
    """scores `[..., q, k]`, values `[..., k, d]` -> (exp(scores - max) @ values, max, sum of the exps),
    the last two `[..., q, 1]`: the pieces of a softmax over more keys than these."""
    peak = scores.amax(-1, keepdim=True)
    weights = scores.sub_(peak).exp_()
    return torch.matmul(weights, values), peak, weights.sum(-1, keepdim=True)


def cascade_attention(
    module: nn.Module,
    query: torch.Tensor,  # [rows, heads, 1, d]
    key: torch.Tensor,  # [rows, kv, 1, d]
    value: torch.Tensor,  # [rows, kv, 1, d]
    attention_mask: torch.Tensor | None,
    *,
    cascade: CascadeCache,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **_: Any,
) -> tuple[torch.Tensor, None]:  # [rows, 1, heads, d], as transformers' attention functions return
    """The `AttentionInterface` entry: one decoding step of `module`'s layer (see `CascadeCache.attend`)."""
    if query.shape[2] != 1 or dropout or sliding_window is not None or softcap is not None:
        raise ValueError("cascade attention decodes one token at a time, without dropout, windows or softcap")
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return cascade.attend(module.layer_idx, query, key, value, scale)[:, None], None


@functools.cache
def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, cascade_attention)


@contextlib.contextmanager
def decoding(model: nn.Module) -> Iterator[None]:
    """While inside, `model`'s attention layers run `cascade_attention` (pass `cascade=` to each call)."""
    _register()
    config = unwrap_peft(model).config
    before = config._attn_implementation
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = before
