"""`PolicyGradientLoss`: the base every loss extends, holding and checking the pipeline's parameters.

A loss is a frozen dataclass: its parameters are fields (each with its default and check, `params.param`),
and class attributes pick the pipeline's importance weight and aggregation, the metric keys its objective
reports and the clip sides the pipeline counts for it; `per_token` is the objective. The Hydra schema of its
`loss=<name>` option is derived from the same fields, so a loss is one class in one file (docs/losses.md):

    @register_loss
    class MyLoss(PolicyGradientLoss):
        name = "mine"
        aggregation = "token_mean"
        alpha: float = param(0.5, positive)

        def per_token(self, spec, b, ratio):
            return -self.alpha * ratio * b.advantages, {}
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from twinkle_exp.loss.batch import TokenBatch, prepare_batch
from twinkle_exp.loss.core import (
    CLIP_SIDES,
    ENTROPY_TOKENS,
    OFF_POLICY_REFERENCES,
    LossOutput,
    LossSpec,
    compute_loss,
)
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
)
from twinkle_exp.loss.registry import loss_dataclass


@loss_dataclass
class PolicyGradientLoss:
    """Base of the GRPO family. Subclasses fix how the pipeline weighs, clips and aggregates tokens.

    Parameters are keyword-only. Call with keyword tensors (see `__call__`); returns `LossOutput(loss, metrics)`.
    """

    name: ClassVar[str]
    importance: ClassVar[str] = "token"  # one of core.IMPORTANCE_LEVELS
    aggregation: ClassVar[str] = "seq_mean_token_mean"  # one of core.AGGREGATIONS
    metric_keys: ClassVar[tuple[str, ...]] = ()  # the keys of `per_token`'s metrics dict
    clip_sides: ClassVar[tuple[str, ...]] = CLIP_SIDES  # the PPO-style clip counts the pipeline reports
    takes_clip_switches: ClassVar[bool] = False  # whether `per_token` honours clip_ratio_c and delta
    # Whether `per_token` applies the rollout-correction weights / the switches' token masks itself (an
    # objective whose value is one number per sequence puts them inside it); otherwise the pipeline
    # multiplies the per-token loss by them.
    applies_rollout_weights: ClassVar[bool] = False
    applies_policy_keep: ClassVar[bool] = False
    # The `loss=<name>` option's values that are not the class's defaults: interpolations into the rest of
    # the experiment's config (Dr.GRPO's length is the sampler's budget).
    config_defaults: ClassVar[dict[str, str]] = {}
    # Whether `per_token` is a multiple of each row's advantage and reads the other rows only through the
    # step's totals (no selection per call: a covariance, a second moment, a clip search): then a row whose
    # advantage is 0 adds nothing to the gradient (`zero_advantage_inert`). Off unless a class says so, and
    # each class that does is checked against its own gradients (tests/test_zero_advantage_rows.py).
    advantage_linear: ClassVar[bool] = False
    # Whether `per_token` compares each sequence with the others of its group (`b.group_ids`): then every
    # call must hold whole groups (optim.minibatch_split=groups, micro-batches a multiple of the group size).
    whole_groups: ClassVar[bool] = False

    clip_range: float = param(0.2, positive)
    clip_range_high: float | None = param(None, optional(positive))  # None: same as clip_range
    beta: float = param(0.0, non_negative)
    kl_estimator: str = param("k3", one_of(KL_ESTIMATORS))
    # Switches (docs/losses.md); the defaults leave every loss as it was.
    clip_ratio_c: float | None = param(None, optional(greater_than(1.0)))  # dual clip (clipped objective)
    delta: float | None = param(None, optional(greater_than(1.0)))  # two-sided cap (clipped objective)
    kl_bias_correction: bool = param(False, boolean)  # KL term weighted by pi / pi_old
    off_policy_mask_threshold: float | None = param(None, optional(finite))  # DeepSeek-V3.2's sequence mask
    # The mask's gap is to the sampler's log-probs when the call passes them (DeepSeek-V3.2, TRL), or "old".
    off_policy_mask_reference: str = param("sampler", one_of(OFF_POLICY_REFERENCES))
    top_entropy_quantile: float = param(1.0, fraction)  # train on the top share of tokens by entropy
    entropy_coef: float = param(0.0, finite)  # loss -= coef * mean entropy
    entropy_tokens: str = param("all", one_of(ENTROPY_TOKENS))  # "kept": over top_entropy's tokens (TRL)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check = f.metadata.get("check")
            if check is not None:
                object.__setattr__(self, f.name, check(f.name, getattr(self, f.name)))
        for switch in ("clip_ratio_c", "delta"):
            if getattr(self, switch) is not None and not self.takes_clip_switches:
                raise ValueError(f"{switch} applies to the PPO-clipped objective only, not {self.name}'s")

    def per_token(
        self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The objective (`core.Objective.per_token`): `[B, T]` per-token loss and `[B, T]` metrics."""
        raise NotImplementedError(f"{type(self).__name__} defines no per_token objective")

    @property
    def max_completion_length(self) -> int | None:
        """The "constant" aggregation's length; None: each call's longest completion."""
        return None

    @property
    def needs_entropy(self) -> bool:
        """Whether the call needs `entropies` (or logits to compute them): an entropy switch is on."""
        return self.top_entropy_quantile < 1.0 or self.entropy_coef != 0.0

    @property
    def entropy_grad(self) -> bool:
        """Whether the entropies need their gradient: an entropy bonus is part of the loss."""
        return self.entropy_coef != 0.0

    @property
    def zero_advantage_inert(self) -> bool:
        """Whether rows whose advantage is exactly 0 can leave the update with the gradient unchanged: the
        objective is `advantage_linear` and no term outside it (a KL penalty, an entropy bonus, the per-call
        entropy quantile) reaches those rows (`optim.skip_zero_advantage`)."""
        return type(self).advantage_linear and self.beta == 0 and not self.needs_entropy

    @property
    def spec(self) -> LossSpec:
        return LossSpec(
            importance=self.importance,
            aggregation=self.aggregation,
            clip_range=self.clip_range,
            clip_range_high=self.clip_range if self.clip_range_high is None else self.clip_range_high,
            beta=self.beta,
            kl_estimator=self.kl_estimator,
            max_completion_length=self.max_completion_length,
            kl_bias_correction=self.kl_bias_correction,
            off_policy_mask_threshold=self.off_policy_mask_threshold,
            off_policy_mask_reference=self.off_policy_mask_reference,
            top_entropy_quantile=self.top_entropy_quantile,
            entropy_coef=self.entropy_coef,
            entropy_tokens=self.entropy_tokens,
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
                `rollout_weights` `[B, T]` (`rollout_correction`'s weights on the policy term),
                `sampler_logps` `[B, T]` (the sampler's, for the off-policy mask), `rollout_mask` `[B, T]`
                bool (verl's rejection: the tokens outside it leave the batch) and `group_index`
                `[num_sequences]` long (each sequence's group, for the objectives that read it).
            num_sequences, num_tokens: the optimizer step's totals when the step is split in micro-batches.
        """
        spec = self.spec
        batch = prepare_batch(**inputs, entropy_from_logits=self.needs_entropy)
        return compute_loss(spec, self, batch, num_sequences=num_sequences, num_tokens=num_tokens)
