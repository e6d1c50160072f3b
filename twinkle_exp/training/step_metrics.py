"""The metrics of one optimizer step, accumulated over its micro-batches and read off with one host sync."""

from __future__ import annotations

import torch

from twinkle_exp import metric_names as M
from twinkle_exp.loss import LossOutput, derived_clip_metrics
from twinkle_exp.loss import metric_keys as K
from twinkle_exp.parallel import collectives

# Keys whose micro-batch values add up to the step's value (the loss normalises them by the step's totals).
_SUMMED = (K.POLICY_LOSS,)
# Keys reduced as a minimum or a maximum over micro-batches and ranks; every other one is token-weighted.
_MIN = (K.RATIO_MIN, K.ROLLOUT_RATIO_MIN)
_MAX = (K.RATIO_MAX, K.ROLLOUT_RATIO_MAX)
_TOKENS, _GAP_COUNT = "tokens", "gap count"  # denominators, reduced with the sums and then dropped


class StepMetrics:
    """Token-weighted means of the loss metrics, min/max of the ratio, summed loss, entropy, sampler gap."""

    def __init__(self) -> None:
        self._weighted: dict[str, torch.Tensor] = {}
        self._summed: dict[str, torch.Tensor] = {}
        self._tokens: torch.Tensor | float = 0.0
        self._min: dict[str, list[torch.Tensor]] = {}
        self._max: dict[str, list[torch.Tensor]] = {}
        self._entropy: torch.Tensor | None = None
        self._gap: list[torch.Tensor] = []

    def add_micro(
        self,
        out: LossOutput,
        mask: torch.Tensor,
        entropy: torch.Tensor | None = None,
        sampler_gap: torch.Tensor | None = None,
        correction: dict[str, torch.Tensor] | None = None,
    ) -> None:
        """One micro-batch: `mask` `[b, T]` its completion tokens, `entropy` `[b, T]`, `sampler_gap` `[b, T]`
        the trainer's minus the sampler's log-probs (given on a rollout's first step, before any update),
        `correction` the rollout correction's metrics (`K.ROLLOUT`, token means over `mask`, min, max)."""
        tokens = mask.sum()
        self._tokens = self._tokens + tokens
        self._summed[M.LOSS] = self._summed.get(M.LOSS, 0.0) + out.loss.detach()
        for key, value in (out.metrics | (correction or {})).items():
            if key in _SUMMED:
                self._summed[M.TRAIN + key] = self._summed.get(M.TRAIN + key, 0.0) + value
            elif key in _MIN:
                self._min.setdefault(M.TRAIN + key, []).append(value)
            elif key in _MAX:
                self._max.setdefault(M.TRAIN + key, []).append(value)
            else:
                self._weighted[M.TRAIN + key] = self._weighted.get(M.TRAIN + key, 0.0) + value * tokens
        if entropy is not None:
            self._entropy = (entropy * mask).sum() + (0.0 if self._entropy is None else self._entropy)
        if sampler_gap is not None:
            self._gap.append(sampler_gap.abs()[mask])

    def summary(self, grad_norm: torch.Tensor, lr: float) -> dict[str, float]:
        """The global step's metrics, keyed as the trainer logs them; `lr` is the rate this step used.

        Reduced over data-parallel ranks as sums and counts (token-weighted means), minima and maxima, so
        they equal what one process holding every rank's rows logs. `grad_norm` is already global.
        """
        sums: dict[str, torch.Tensor] = {_TOKENS: torch.as_tensor(self._tokens, dtype=torch.float32)}
        sums |= self._weighted | self._summed
        if self._entropy is not None:
            sums[M.ENTROPY] = self._entropy
        mins = {key: torch.stack(values).min() for key, values in self._min.items()}
        maxs = {key: torch.stack(values).max() for key, values in self._max.items()}
        if self._gap:
            gap = torch.cat(self._gap)
            sums[M.LOGP_MISMATCH_MEAN], sums[_GAP_COUNT] = gap.sum(), torch.tensor(float(gap.numel()))
            maxs[M.LOGP_MISMATCH_MAX] = gap.max()
        device = grad_norm.device
        values = {}
        for op, part in (("sum", sums), ("min", mins), ("max", maxs)):
            if not part:  # a step that ran no micro-batch (optim.skip_zero_advantage) has no minima
                continue
            packed = torch.stack(
                [torch.as_tensor(v, dtype=torch.float32, device=device) for v in part.values()]
            )
            values |= dict(zip(part, collectives.all_reduce(packed, op), strict=True))
        tokens = values.pop(_TOKENS).clamp(min=1.0)
        for key in self._weighted:
            values[key] = values[key] / tokens
        if M.ENTROPY in values:
            values[M.ENTROPY] = values[M.ENTROPY] / tokens
        if _GAP_COUNT in values:
            values[M.LOGP_MISMATCH_MEAN] = values[M.LOGP_MISMATCH_MEAN] / values.pop(_GAP_COUNT)
        values[M.GRAD_NORM] = grad_norm
        keys = list(values)
        floats = torch.stack([torch.as_tensor(values[k], dtype=torch.float32, device=device) for k in keys])
        floats = floats.tolist()  # the step's one host sync
        step = dict(zip(keys, floats, strict=True))
        return step | derived_clip_metrics(step, prefix=M.TRAIN) | {M.LEARNING_RATE: lr}
