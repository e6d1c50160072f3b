"""The six public losses: frozen dataclasses that hold and check their parameters over `core.compute_loss`.

A loss is its parameters (dataclass fields, each with its default and check, see `params.param`) plus the
class attributes that pick the pipeline's importance weight, objective and aggregation. The Hydra schema of
`conf/loss/<name>.yaml` is derived from the same fields, so adding a loss is one class (plus its yaml):

    @register_loss
    class MyLoss(PolicyGradientLoss):
        name = "mine"
        aggregation = "token_mean"
        alpha: float = param(0.5, positive)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import torch

from twinkle_exp.loss.batch import prepare_batch
from twinkle_exp.loss.core import LossOutput, LossSpec, compute_loss
from twinkle_exp.loss.kl import KL_ESTIMATORS
from twinkle_exp.loss.params import (
    boolean,
    finite,
    fraction,
    greater_than,
    non_negative,
    one_of,
    optional,
    param,
    positive,
    positive_int,
)

LOSSES: dict[str, type[PolicyGradientLoss]] = {}


def _refuse_unknown_parameters(cls: type) -> None:
    """Wrap the dataclass `__init__` so an unknown keyword is a ValueError that lists the valid ones."""
    generated = cls.__init__
    names = [f.name for f in dataclasses.fields(cls)]

    @functools.wraps(generated)
    def __init__(self, **params: Any) -> None:
        unknown = sorted(set(params) - set(names))
        if unknown:
            raise ValueError(
                f"{cls.__name__} got unknown parameter(s) {unknown}; valid parameters: {sorted(names)}"
            )
        generated(self, **params)

    cls.__init__ = __init__


def _loss_dataclass(cls: type) -> type:
    cls = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    _refuse_unknown_parameters(cls)
    return cls


def register_loss(cls: type[PolicyGradientLoss]) -> type[PolicyGradientLoss]:
    """Class decorator: make `cls` a checked frozen dataclass and register it in `LOSSES` under `cls.name`."""
    if not isinstance(cls.__dict__.get("name"), str):
        raise TypeError(f"{cls.__name__} needs a class attribute `name`, the name of its conf/loss option")
    if cls.name in LOSSES:
        raise ValueError(f"a loss named {cls.name!r} is already registered ({LOSSES[cls.name].__name__})")
    cls = _loss_dataclass(cls)
    LOSSES[cls.name] = cls
    return cls


@_loss_dataclass
class PolicyGradientLoss:
    """Base of the GRPO family. Subclasses fix how the pipeline weighs, clips and aggregates tokens.

    Parameters are keyword-only. Call with keyword tensors (see `__call__`); returns `LossOutput(loss, metrics)`.
    """

    name: ClassVar[str]
    importance: ClassVar[str] = "token"
    objective: ClassVar[str] = "clip"
    aggregation: ClassVar[str] = "seq_mean_token_mean"

    clip_range: float = param(0.2, positive)
    clip_range_high: float | None = param(None, optional(positive))  # None: same as clip_range
    beta: float = param(0.0, non_negative)
    kl_estimator: str = param("k3", one_of(KL_ESTIMATORS))
    # Switches (docs/losses.md); the defaults leave every loss as it was.
    clip_ratio_c: float | None = param(None, optional(greater_than(1.0)))  # dual clip (clipped objective)
    delta: float | None = param(None, optional(greater_than(1.0)))  # two-sided cap (clipped objective)
    kl_bias_correction: bool = param(False, boolean)  # KL term weighted by pi / pi_old
    off_policy_mask_threshold: float | None = param(None, optional(finite))  # DeepSeek-V3.2's sequence mask
    top_entropy_quantile: float = param(1.0, fraction)  # train on the top share of tokens by entropy
    entropy_coef: float = param(0.0, finite)  # loss -= coef * mean entropy

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check = f.metadata.get("check")
            if check is not None:
                object.__setattr__(self, f.name, check(f.name, getattr(self, f.name)))
        for switch in ("clip_ratio_c", "delta"):
            if getattr(self, switch) is not None and self.objective != "clip":
                raise ValueError(f"{switch} applies to the PPO-clipped objective only, not {self.name}'s")

    def _extra_spec(self) -> dict[str, Any]:
        return {}

    @property
    def needs_entropy(self) -> bool:
        """Whether the call needs `entropies` (or logits to compute them): an entropy switch is on."""
        return self.top_entropy_quantile < 1.0 or self.entropy_coef != 0.0

    @property
    def entropy_grad(self) -> bool:
        """Whether the entropies need their gradient: an entropy bonus is part of the loss."""
        return self.entropy_coef != 0.0

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
            clip_ratio_c=self.clip_ratio_c,
            delta=self.delta,
            kl_bias_correction=self.kl_bias_correction,
            off_policy_mask_threshold=self.off_policy_mask_threshold,
            top_entropy_quantile=self.top_entropy_quantile,
            entropy_coef=self.entropy_coef,
            **self._extra_spec(),
        )

    def __call__(
        self,
        *,
        num_sequences: int | None = None,
        num_tokens: int | None = None,
        **inputs: torch.Tensor | None,
    ) -> LossOutput:
        """Loss of one (micro-)batch.

        Args:
            **inputs: the batch, as `batch.prepare_batch` takes it: `labels` `[B, T]` (unshifted, -100 on
                prompt and padding), `advantages` `[num_sequences]` or `[B, T]`, `logits` `[B, T, V]` or
                `logps` `[B, T]`, optional `old_logps` `[B, T]` (None: on-policy), `ref_logps` `[B, T]`
                (required when beta > 0), `position_ids` `[B, T]` (packed rows), `entropies` `[B, T]`
                (for `top_entropy_quantile` / `entropy_coef` when only `logps` are given) and
                `rollout_weights` `[B, T]` (`rollout_correction`'s weights on the policy term).
            num_sequences, num_tokens: the optimizer step's totals when the step is split in micro-batches.
        """
        spec = self.spec
        batch = prepare_batch(**inputs, entropy_from_logits=self.needs_entropy)
        return compute_loss(spec, batch, num_sequences=num_sequences, num_tokens=num_tokens)


@register_loss
class GRPOLoss(PolicyGradientLoss):
    """GRPO (Shao et al., 2024): PPO-clipped token ratios, mean over sequences of each sequence's token mean."""

    name = "grpo"


@register_loss
class GSPOLoss(PolicyGradientLoss):
    """GSPO (Zheng et al., 2025): one length-normalised ratio per sequence, clipped; sequences weigh the same."""

    name = "gspo"
    importance = "sequence"


@register_loss
class SAPOLoss(PolicyGradientLoss):
    """SAPO (Qwen, 2025): a smooth sigmoid gate instead of a hard clip; per-token loss -(4/tau) sigmoid(tau (r-1)) A.

    `tau` sets both temperatures; `tau_pos` (A > 0) and `tau_neg` (A <= 0) override one side each.
    """

    name = "sapo"
    objective = "sapo"

    tau: float = param(1.0, positive)
    tau_pos: float | None = param(None, optional(positive))  # None: tau
    tau_neg: float | None = param(None, optional(positive))  # None: tau

    def __post_init__(self) -> None:
        super().__post_init__()
        for side in ("tau_pos", "tau_neg"):
            if getattr(self, side) is None:
                object.__setattr__(self, side, self.tau)

    def _extra_spec(self) -> dict[str, Any]:
        return {"tau_pos": self.tau_pos, "tau_neg": self.tau_neg}


@register_loss
class CISPOLoss(PolicyGradientLoss):
    """CISPO (MiniMax-M1, 2025): REINFORCE with a stop-gradient weight capped at 1 + hi; token mean over the batch."""

    name = "cispo"
    objective = "cispo"
    aggregation = "token_mean"

    weight_floor: bool = param(False, boolean)  # verl's form: the weight also clipped below at 1 - clip_range

    def _extra_spec(self) -> dict[str, Any]:
        return {"cispo_floor": self.weight_floor}


@register_loss
class BNPOLoss(PolicyGradientLoss):
    """BNPO: GRPO's clipped objective, token mean over the whole optimizer-step batch."""

    name = "bnpo"
    aggregation = "token_mean"


@register_loss
class DRGRPOLoss(PolicyGradientLoss):
    """Dr.GRPO (Liu et al., 2025): clipped objective, summed and divided by sequences x max_completion_length.

    `max_completion_length` should be the sampler's budget; None uses the longest completion of each call,
    which is then not invariant to how a step is split into micro-batches.
    """

    name = "drgrpo"
    aggregation = "constant"

    max_completion_length: int | None = param(None, optional(positive_int))

    def _extra_spec(self) -> dict[str, Any]:
        return {"max_completion_length": self.max_completion_length}


def get_loss_class(name: str) -> type[PolicyGradientLoss]:
    """The loss class registered under `name` (see `LOSSES`)."""
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}") from None
