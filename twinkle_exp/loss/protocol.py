"""`LossFn`: the contract between the trainer and a loss, which every registered loss class satisfies."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from twinkle_exp.loss.core import LossOutput


@runtime_checkable
class LossFn(Protocol):
    """A loss the trainer can optimise: what it asks of the trainer, and a call on one micro-batch.

    `beta > 0` makes the trainer build a frozen reference and pass `ref_logps`; `needs_entropy` makes it
    pass `entropies`, with their gradient when `entropy_grad`; `zero_advantage_inert` lets the trainer leave rows
    whose advantage is 0 out of the forward. The call's sum over the micro-batches of an
    optimizer step must equal the loss of the whole step, given the step's totals.
    """

    beta: float
    needs_entropy: bool  # pass `entropies`
    entropy_grad: bool  # ... with their gradient (an entropy bonus), which only the logits path can give
    zero_advantage_inert: (
        bool  # rows with advantage 0 add nothing to the gradient (optim.skip_zero_advantage)
    )

    def __call__(
        self,
        *,
        logps: torch.Tensor,  # [B, T] with grad, aligned with labels
        labels: torch.Tensor,  # [B, T] unshifted, -100 on prompt and padding
        advantages: torch.Tensor,  # [B] one per sequence, or [B, T]
        old_logps: torch.Tensor | None,  # [B, T] the behaviour policy's; None: on-policy
        ref_logps: torch.Tensor | None,  # [B, T] the reference's; required when beta > 0
        entropies: torch.Tensor | None = None,  # [B, T] per-token entropy; given when needs_entropy
        rollout_weights: torch.Tensor
        | None = None,  # [B, T] a weight on the policy term (rollout correction)
        sampler_logps: torch.Tensor | None = None,  # [B, T] the sampler's, where they differ from old_logps
        rollout_mask: torch.Tensor | None = None,  # [B, T] bool: tokens outside it leave the batch (verl)
        group_index: torch.Tensor | None = None,  # [B] long: the group (prompt) each sequence was drawn for
        num_sequences: int | None = None,  # the optimizer step's totals, over micro-batches and ranks
        num_tokens: int | None = None,
    ) -> LossOutput: ...
