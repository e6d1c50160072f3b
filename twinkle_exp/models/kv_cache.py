"""Sharing one prompt's prefill among its group: pick the distinct prompts, then copy cache rows to the group.

`generate` prefills each distinct prompt once and expands the resulting KV cache to the `group_size`
samples (and to repeated prompts), instead of prefilling `group_size` identical copies; decoding later drops
the rows that have finished the same way (`select_cache_rows`). Two cache formats occur: the built-in
model's tuple of `(key, value)` tensors per layer, `[B, heads, S, head_dim]` each, and transformers' `Cache`
objects (`DynamicCache`, ...), which select batch rows in place with `batch_select_indices`.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch import nn


def distinct_rows(rows: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct sequences of `rows` in first-seen order, and for each row the index of its sequence."""
    first: dict[tuple[int, ...], int] = {}
    source = [first.setdefault(tuple(r), len(first)) for r in rows]
    return [list(r) for r in first], source


def select_cache_rows(cache: Any, index: torch.Tensor) -> Any:
    """The cache of the batch `rows[index]` (`index` `[N]` long, repeats allowed) from the cache of `rows`.

    Tuples and lists of tensors are rebuilt; a transformers `Cache` is changed in place and returned.
    """
    if isinstance(cache, torch.Tensor):
        return cache.index_select(0, index)
    if isinstance(cache, tuple | list):
        return type(cache)(select_cache_rows(part, index) for part in cache)
    select = getattr(cache, "batch_select_indices", None)
    if select is None:
        raise TypeError(
            f"cannot share a prefill or drop ended rows through a {type(cache).__name__}: it has no "
            "batch_select_indices; pass decoding=Decoding.PER_ROW, compact=False to generate"
        )
    select(index)
    return cache


def preallocate(cache: Any, capacity: int) -> Any:
    """The cache with room for `capacity` positions, so that decoding appends in place.

    transformers' `DynamicLayer` grows by `torch.cat`, a copy of the layer's whole cache at every token
    (17% of our sampler's time on a tiny Qwen2). Its layers are replaced by ones that write into buffers
    allocated once, and hand the model views of the filled part. A layer whose keys stop being such a view
    (another `Cache` method replaced them), or that would outgrow the buffer, goes back to `torch.cat`.
    Tuple caches and other layer kinds are returned unchanged.
    """
    layers = getattr(cache, "layers", None)
    if not isinstance(layers, list):
        return cache
    in_place = _in_place_layer_class()
    for i, layer in enumerate(layers):
        if in_place is not None and type(layer) is in_place.__base__ and layer.is_initialized:
            layers[i] = in_place.of(layer, capacity)
    return cache


@functools.cache
def _in_place_layer_class() -> type | None:
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:  # no transformers, or one without cache layers: nothing to convert
        return None

    class InPlaceLayer(DynamicLayer):
        """A `DynamicLayer` that appends into buffers `[B, heads, capacity, head_dim]`."""

        @classmethod
        def of(cls, layer: DynamicLayer, capacity: int) -> InPlaceLayer:
            new = cls.__new__(cls)
            new.__dict__.update(layer.__dict__)
            new.key_buffer, new.keys = _buffer(layer.keys, capacity)
            new.value_buffer, new.values = _buffer(layer.values, capacity)
            return new

        def update(self, key_states, value_states, *args, **kwargs):
            start, new = self.keys.shape[2], key_states.shape[2]
            if self.keys.data_ptr() != self.key_buffer.data_ptr() or start + new > self.key_buffer.shape[2]:
                return super().update(key_states, value_states, *args, **kwargs)
            self.key_buffer.narrow(2, start, new).copy_(key_states)
            self.value_buffer.narrow(2, start, new).copy_(value_states)
            self.keys = self.key_buffer.narrow(2, 0, start + new)
            self.values = self.value_buffer.narrow(2, 0, start + new)
            return self.keys, self.values

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            """The rows `indices` `[B']` long, in new buffers: `DynamicLayer`'s own selection would leave
            the keys outside the buffer, and every later token would go back to `torch.cat`."""
            if self.keys.data_ptr() != self.key_buffer.data_ptr():
                return super().batch_select_indices(indices)
            # The whole buffer in one copy: selecting the filled part, then copying it into a new buffer,
            # moved more bytes whenever more than half of it was filled.
            filled = self.keys.shape[2]
            self.key_buffer = self.key_buffer.index_select(0, indices)
            self.value_buffer = self.value_buffer.index_select(0, indices)
            self.keys = self.key_buffer.narrow(2, 0, filled)
            self.values = self.value_buffer.narrow(2, 0, filled)

    return InPlaceLayer


def _buffer(states: torch.Tensor, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A `[B, heads, max(capacity, S), head_dim]` buffer holding `states` `[B, heads, S, head_dim]` first, and
    the view of that filled part."""
    b, h, s, d = states.shape
    buffer = states.new_empty(b, h, max(capacity, s), d)
    buffer[..., :s, :] = states
    return buffer, buffer[..., :s, :]


def cache_argument_name(model: nn.Module) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params and "past_key_values" not in params else "past_key_values"


def returned_cache(out: Any) -> Any:
    """The KV cache a model's output carries, under either of transformers' names for it."""
    new_cache = getattr(out, "cache", None)
    return out.past_key_values if new_cache is None else new_cache
