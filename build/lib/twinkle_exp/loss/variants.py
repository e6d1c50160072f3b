"""The six public losses: thin presets over `core.compute_loss` that hold and validate their parameters."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from twinkle_exp.loss.batch import prepare_batch
from twinkle_exp.loss.core import LossOutput, LossSpec, compute_loss
from twinkle_exp.loss.kl import KL_ESTIMATORS


def _positive(name: str, value: Any, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return float(value)


class PolicyGradientLoss:
    """Base of the GRPO family. Subclasses fix how the pipeline weighs, clips and aggregates tokens.

    Call with keyword tensors (see `__call__`); returns `LossOutput(loss, metrics)`.
    """

    name: ClassVar[str]
    importance: ClassVar[str] = "token"
    objective: ClassVar[str] = "clip"
    aggregation: ClassVar[str] = "seq_mean_token_mean"

    def __init__(
        self,
        *,
        clip_range: float = 0.2,
        clip_range_high: float | None = None,
        beta: float = 0.0,
        kl_estimator: str = "k3",
        **unknown: Any,
    ) -> None:
        if unknown:
            raise ValueError(
                f"{type(self).__name__} got unknown parameter(s) {sorted(unknown)}; "
                f"valid parameters: {sorted(self._parameter_names())}"
            )
        self.clip_range = _positive("clip_range", clip_range)
        self.clip_range_high = (
            None if clip_range_high is None else _positive("clip_range_high", clip_range_high)
        )
        self.beta = _positive("beta", beta, allow_zero=True)
        if kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator must be one of {list(KL_ESTIMATORS)}, got {kl_estimator!r}")
        self.kl_estimator = kl_estimator

    @classmethod
    def _parameter_names(cls) -> list[str]:
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            init = klass.__dict__.get("__init__")
            if init is not None and klass is not object:
                code = init.__code__
                names += [n for n in code.co_varnames[1 : 1 + code.co_kwonlyargcount] if n not in names]
        return names

    def _extra_spec(self) -> dict[str, Any]:
        return {}

    @property
    def spec(self) -> LossSpec:
        return LossSpec(
            importance=self.importance,
            objective=self.objective,
            aggregation=self.aggregation,
            clip_low=self.clip_range,
            clip_high=self.clip_range if self.clip_range_high is None else self.clip_range_high,
            beta=self.beta,
            kl_estimator=self.kl_estimator,
            **self._extra_spec(),
        )

    def __call__(
        self,
        *,
        labels: torch.Tensor,
        advantages: torch.Tensor,
        logits: torch.Tensor | None = None,
        logps: torch.Tensor | None = None,
        old_logps: torch.Tensor | None = None,
        ref_logps: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        num_sequences: int | None = None,
        num_tokens: int | None = None,
    ) -> LossOutput:
        """Loss of one (micro-)batch.

        Args:
            labels: `[B, T]` unshifted token ids, -100 on prompt and padding.
            advantages: `[num_sequences]` or per-token `[B, T]`.
            logits: `[B, T, V]` (the loss shifts them), or `logps`: `[B, T]` log-probs of `labels`.
            old_logps: `[B, T]` the sampling policy's log-probs; None = on-policy (`logps.detach()`).
            ref_logps: `[B, T]` the reference policy's log-probs; required when `beta > 0`.
            position_ids: `[B, T]` for packed rows (restart at 0 at each sequence).
            num_sequences, num_tokens: the optimizer step's totals when the step is split in micro-batches.
        """
        batch = prepare_batch(
            labels=labels,
            advantages=advantages,
            logits=logits,
            logps=logps,
            old_logps=old_logps,
            ref_logps=ref_logps,
            position_ids=position_ids,
        )
        return compute_loss(self.spec, batch, num_sequences=num_sequences, num_tokens=num_tokens)

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._parameter_names())
        return f"{type(self).__name__}({args})"


class GRPOLoss(PolicyGradientLoss):
    """GRPO (Shao et al., 2024): PPO-clipped token ratios, mean over sequences of each sequence's token mean."""

    name = "grpo"


class GSPOLoss(PolicyGradientLoss):
    """GSPO (Zheng et al., 2025): one length-normalised ratio per sequence, clipped; sequences weigh the same."""

    name = "gspo"
    importance = "sequence"


class BNPOLoss(PolicyGradientLoss):
    """BNPO: GRPO's clipped objective, token mean over the whole optimizer-step batch."""

    name = "bnpo"
    aggregation = "token_mean"


class CISPOLoss(PolicyGradientLoss):
    """CISPO (MiniMax-M1, 2025): REINFORCE with a stop-gradient weight capped at 1 + hi; token mean over the batch."""

    name = "cispo"
    objective = "cispo"
    aggregation = "token_mean"


class DRGRPOLoss(PolicyGradientLoss):
    """Dr.GRPO (Liu et al., 2025): clipped objective, summed and divided by sequences x max_completion_length.

    `max_completion_length` should be the sampler's budget; None uses the longest completion of each call,
    which is then not invariant to how a step is split into micro-batches.
    """

    name = "drgrpo"
    aggregation = "constant"

    def __init__(self, *, max_completion_length: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if max_completion_length is not None and (
            isinstance(max_completion_length, bool)
            or not isinstance(max_completion_length, int)
            or max_completion_length < 1
        ):
            raise ValueError(
                f"max_completion_length must be a positive integer, got {max_completion_length!r}"
            )
        self.max_completion_length = max_completion_length

    def _extra_spec(self) -> dict[str, Any]:
        return {"max_completion_length": self.max_completion_length}


class SAPOLoss(PolicyGradientLoss):
    """SAPO (Qwen, 2025): a smooth sigmoid gate instead of a hard clip; per-token loss -(4/tau) sigmoid(tau (r-1)) A.

    `tau` sets both temperatures; `tau_pos` (A > 0) and `tau_neg` (A <= 0) override one side each.
    """

    name = "sapo"
    objective = "sapo"

    def __init__(
        self, *, tau: float = 1.0, tau_pos: float | None = None, tau_neg: float | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.tau = _positive("tau", tau)
        self.tau_pos = self.tau if tau_pos is None else _positive("tau_pos", tau_pos)
        self.tau_neg = self.tau if tau_neg is None else _positive("tau_neg", tau_neg)

    def _extra_spec(self) -> dict[str, Any]:
        return {"tau_pos": self.tau_pos, "tau_neg": self.tau_neg}


LOSSES: dict[str, type[PolicyGradientLoss]] = {
    cls.name: cls for cls in (GRPOLoss, GSPOLoss, SAPOLoss, CISPOLoss, BNPOLoss, DRGRPOLoss)
}


def get_loss_class(name: str) -> type[PolicyGradientLoss]:
    """The loss class registered under `name` ("grpo", "gspo", "sapo", "cispo", "bnpo", "drgrpo")."""
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}") from None
