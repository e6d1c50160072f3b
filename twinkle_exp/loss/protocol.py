"""`LossFn`: the contract between the trainer and a loss, which every registered loss class satisfies."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from twinkle_exp.loss.core import LossOutput


@runtime_checkable
class LossFn(Protocol):
    """A loss the trainer can optimise: a KL coefficient, and a call on one micro-batch.

    `beta > 0` makes the trainer build a frozen reference and pass `ref_logps`. The call's sum over the
    micro-batches of an optimizer step must equal the loss of the whole step, given the step's totals.
    """

    beta: float

    def __call__(
        self,
        *,
        logps: torch.Tensor,  # [B, T] with grad, aligned with labels
        labels: torch.Tensor,  # [B, T] unshifted, -100 on prompt and padding
        advantages: torch.Tensor,  # [B] one per sequence, or [B, T]
        old_logps: torch.Tensor | None,  # [B, T] the behaviour policy's; None: on-policy
        ref_logps: torch.Tensor | None,  # [B, T] the reference's; required when beta > 0
        num_sequences: int | None = None,  # the optimizer step's totals, over micro-batches and ranks
        num_tokens: int | None = None,
    ) -> LossOutput: ...
