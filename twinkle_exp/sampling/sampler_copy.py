"""The model the sampler runs: the policy, its LoRA adapters merged into a plain copy, or a lower-precision copy.

With `merge_adapters` a LoRA policy samples from `MergedCopy` (models/merged_copy.py): one product per layer
instead of three, the same function up to float rounding, refreshed from the policy before every rollout.

A vLLM sampler serving bf16 weights while the trainer updates fp32 ones draws tokens from a slightly different
policy: their log-probs differ by 1e-2 to 3e-2 per token. Sampling from a bf16 copy of the fp32 policy makes
the same gap on a CPU, so the rollout correction (`optim.rollout_correction`) can be tested and studied
without a second engine. The copy is refreshed from the policy's weights before every rollout.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from twinkle_exp.models.merged_copy import MergedCopy, can_merge


class SamplerCopy:
    """`copy(model)`: a copy of `model` cast to `dtype` holding its current weights; without a dtype, `model`
    with its adapters merged (`merge_adapters` and a LoRA `model`), or `model` itself."""

    def __init__(self, dtype: str | None, merge_adapters: bool = False) -> None:
        self.dtype = None if dtype is None else getattr(torch, dtype)
        self.merge_adapters = merge_adapters
        self._copy: nn.Module | None = None
        self._merged: MergedCopy | None = None

    def __call__(self, model: nn.Module) -> nn.Module:
        if self.dtype is None:
            return self.merged(model)
        if self._copy is None:
            self._copy = copy.deepcopy(model).to(self.dtype)
            self._copy.requires_grad_(False)
        else:
            self._copy.load_state_dict(model.state_dict())  # copy_ rounds each fp32 weight to self.dtype
        return self._copy.eval()

    def merged(self, model: nn.Module) -> nn.Module:
        """`model` with its adapters merged (`merge_adapters` and a LoRA `model`), else `model`: the greedy
        validation's model, in the policy's own dtype whatever the rollouts' `dtype`."""
        if not (self.merge_adapters and can_merge(model)):
            return model
        self._merged = self._merged or MergedCopy()
        return self._merged.refresh(model)
