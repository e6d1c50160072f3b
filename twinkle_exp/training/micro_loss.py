"""One micro-batch's loss from its log-probs, built the same way wherever a loss is called on a plan.

The optimizer step (`update_step.py`) and the gradient comparison (`gradient_pair.py`) both call the loss
on rows of an `UpdatePlan`; what the loss sees besides the log-probs (the rollout correction's weights,
per-token advantages of an entropy-shaped estimator, the sampler's own log-probs) is assembled here once,
so the comparison measures the update the run actually takes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from twinkle_exp.config.schema import RolloutCorrectionConfig
from twinkle_exp.loss import LossFn, LossOutput
from twinkle_exp.loss.rollout_correction import rollout_correction
from twinkle_exp.training.update_plan import UpdatePlan

TokenAdvantages = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class LossExtras:
    """What the step adds to the loss's inputs: `correction` (None or mode "none": no weights; else it needs
    `plan.old_logps` recomputed, which the start-up checks make sure of) and `token_advantages`
    (`advantages.token_shaping`: per-sequence advantages `[b]` to per-token `[b, T]` from the entropies)."""

    correction: RolloutCorrectionConfig | None = None
    token_advantages: TokenAdvantages | None = None

    @property
    def needs_entropy(self) -> bool:
        return self.token_advantages is not None


def micro_batch_loss(
    loss_fn: LossFn,
    plan: UpdatePlan,
    rows: torch.Tensor,
    logps: torch.Tensor,
    entropy: torch.Tensor | None,
    advantages: torch.Tensor,
    totals: dict[str, int | torch.Tensor],
    extras: LossExtras,
) -> tuple[LossOutput, dict[str, torch.Tensor] | None]:
    """`loss_fn` on the plan's rows `rows` (`[b]` long, on the log-probs' device): `logps` `[b, T]` their
    log-probs under the policy, `entropy` `[b, T]` or None (required when the loss or `extras` needs it),
    `advantages` `[b]` theirs, `totals` the step's `num_sequences` and `num_tokens`. Returns the loss's
    output and the rollout correction's metrics (None without a correction)."""
    b, mask = plan.rollout, plan.rollout.completion_mask[rows]
    weights, weight_metrics = None, None
    c = extras.correction
    if c is not None and c.mode != "none":
        weights, weight_metrics = rollout_correction(
            b.old_logps[rows], plan.old_logps[rows], mask,
            mode=c.mode, level=c.level, upper=c.upper, low=c.low, high=c.high,
        )  # fmt: skip
    if extras.token_advantages is not None:
        if entropy is None:
            raise ValueError("micro_batch_loss: per-token advantages need the entropies")
        advantages = extras.token_advantages(advantages, entropy, mask)  # [b, T]
    out = loss_fn(
        logps=logps,
        labels=b.labels[rows],
        advantages=advantages,
        old_logps=plan.old_logps[rows],
        sampler_logps=b.old_logps[rows],  # the sampler's own: the off-policy mask's reference (TRL's)
        ref_logps=None if plan.ref_logps is None else plan.ref_logps[rows],
        entropies=entropy if loss_fn.needs_entropy else None,
        rollout_weights=weights,
        group_index=b.prompt_index[rows],  # a group never spans ranks: every rank's rows index its own
        **totals,
    )
    return out, weight_metrics
