"""Accumulates the loss's metrics over the micro-batches and optimizer steps of one rollout."""

from __future__ import annotations

from collections import defaultdict

import torch

from twinkle_exp import metric_names as M
from twinkle_exp.loss import LossOutput
from twinkle_exp.loss import metric_keys as K

# Keys whose micro-batch values add up to the minibatch's value (they are normalised by the step's totals).
_SUMMED = (K.POLICY_LOSS,)
# Per-optimizer-step values, averaged over the rollout's steps, and the keys they are logged under.
_PER_STEP = {"loss": M.LOSS, "grad_norm": M.GRAD_NORM} | {key: M.TRAIN + key for key in _SUMMED}


class UpdateMetrics:
    """Token-weighted means of the loss metrics, min/max of the ratio, and per-step loss and grad norm."""

    def __init__(self) -> None:
        self._weighted: dict[str, float] = defaultdict(float)
        self._tokens = 0.0
        self._steps: list[dict[str, float]] = []
        self._step_sums: dict[str, float] = defaultdict(float)
        self._min = float("inf")
        self._max = float("-inf")
        self._entropy_sum, self._entropy_tokens = 0.0, 0.0

    def add_micro(self, out: LossOutput, entropy: torch.Tensor | None, mask: torch.Tensor) -> None:
        """One micro-batch: `mask` `[b, T]` marks its completion tokens, `entropy` `[b, T]` or None."""
        tokens = float(mask.sum())
        self._tokens += tokens
        self._step_sums["loss"] += float(out.loss.detach())
        for key, value in out.metrics.items():
            if key in _SUMMED:
                self._step_sums[key] += float(value)
            elif key == K.RATIO_MIN:
                self._min = min(self._min, float(value))
            elif key == K.RATIO_MAX:
                self._max = max(self._max, float(value))
            else:
                self._weighted[key] += float(value) * tokens
        if entropy is not None:
            self._entropy_sum += float((entropy * mask).sum())
            self._entropy_tokens += tokens

    def end_step(self, grad_norm: torch.Tensor) -> None:
        self._steps.append({**self._step_sums, "grad_norm": float(grad_norm)})
        self._step_sums = defaultdict(float)

    def summary(self) -> dict[str, float]:
        """Means over the rollout's optimizer steps, keyed as the trainer logs them."""
        out = {M.TRAIN + k: v / max(self._tokens, 1.0) for k, v in self._weighted.items()}
        out[M.TRAIN + K.RATIO_MIN] = self._min
        out[M.TRAIN + K.RATIO_MAX] = self._max
        steps = max(len(self._steps), 1)
        for key, logged_as in _PER_STEP.items():
            out[logged_as] = sum(step.get(key, 0.0) for step in self._steps) / steps
        if self._entropy_tokens:
            out[M.ENTROPY] = self._entropy_sum / self._entropy_tokens
        return out
