"""Sharing one prompt's prefill among its group: pick the distinct prompts, then copy cache rows to the group.

`generate` prefills each distinct prompt once and expands the resulting KV cache to the `group_size`
samples (and to repeated prompts), instead of prefilling `group_size` identical copies. Two cache formats
occur: the built-in model's tuple of `(key, value)` tensors per layer, `[B, heads, S, head_dim]` each, and
transformers' `Cache` objects (`DynamicCache`, ...), which select batch rows in place with
`batch_select_indices`.
"""

from __future__ import annotations

from typing import Any

import torch


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
            f"cannot share a prefill through a {type(cache).__name__}: it has no batch_select_indices; "
            "pass shared_prefill=False to generate"
        )
    select(index)
    return cache
