"""A copy of the policy in a lower precision to sample from: the sampler / trainer mismatch, made on purpose.

A vLLM sampler serving bf16 weights while the trainer updates fp32 ones draws tokens from a slightly different
policy: their log-probs differ by 1e-2 to 3e-2 per token. Sampling from a bf16 copy of the fp32 policy makes
the same gap on a CPU, so the rollout correction (`optim.rollout_correction`) can be tested and studied
without a second engine. The copy is refreshed from the policy's weights before every rollout.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class SamplerCopy:
    """`copy(model)`: `model` itself (dtype None), or a copy of it cast to `dtype` holding its current weights."""

    def __init__(self, dtype: str | None) -> None:
        self.dtype = None if dtype is None else getattr(torch, dtype)
        self._copy: nn.Module | None = None

    def __call__(self, model: nn.Module) -> nn.Module:
        if self.dtype is None:
            return model
        if self._copy is None:
            self._copy = copy.deepcopy(model).to(self.dtype)
            self._copy.requires_grad_(False)
        else:
            self._copy.load_state_dict(model.state_dict())  # copy_ rounds each fp32 weight to self.dtype
        return self._copy.eval()
