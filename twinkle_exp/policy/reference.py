"""The frozen reference model that the KL penalty measures against, without copying weights where it need not.

`PolicyModule` builds one `Reference` (when the loss has beta > 0) and runs its reference pass inside
`reference.weights()`:

    with self.reference.weights() as model:
        ref_logps, _ = sequence_logps(model, ...)
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from twinkle_exp.models.lora import fold_adapters, is_lora

log = logging.getLogger(__name__)


class Reference:
    """Runs code under the reference's weights. Which weights, cheapest first:

    - a LoRA policy: the policy itself with its adapters disabled (no copy, no extra weight memory);
    - a separate model (`policy.reference_name_or_path`), loaded once and frozen;
    - otherwise a frozen deep copy of the policy as it is when the reference is made.
    """

    def __init__(self, model: nn.Module, *, shares_policy: bool):
        self.model = model
        self.shares_policy = shares_policy  # True: `model` is the policy, run with its adapters disabled

    @classmethod
    def of(cls, policy: nn.Module, load: Callable[[], nn.Module] | None = None) -> Reference:
        """The reference for `policy` now: the policy's current function, or what `load` returns.

        With LoRA, adapters that were already trained (a warm-start) are first folded into the base weights,
        so that the base alone is the current policy; the policy computes the same function afterwards.
        """
        if load is not None:
            reference = load()
            _check_same_vocabulary(policy, reference)
            return cls(reference.eval().requires_grad_(False), shares_policy=False)
        if is_lora(policy):
            if fold_adapters(policy):
                log.info("reference: folded the trained LoRA adapters into the base weights")
            return cls(policy, shares_policy=True)
        return cls(copy.deepcopy(policy).eval().requires_grad_(False), shares_policy=False)

    @contextmanager
    def weights(self) -> Iterator[nn.Module]:
        """The module to call for reference log-probs: in eval mode, without gradients."""
        with torch.no_grad():
            if not self.shares_policy:
                yield self.model
                return
            was_training = self.model.training
            self.model.eval()  # no LoRA or attention dropout in the reference pass
            try:
                with self.model.disable_adapter():
                    yield self.model
            finally:
                self.model.train(was_training)

    def to(self, device: torch.device | str) -> Reference:
        if not self.shares_policy:  # a shared policy is placed by whoever places the policy
            self.model.to(device)
        return self


def _vocab_size(model: nn.Module) -> int | None:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return None if head is None else head.weight.shape[0]


def _check_same_vocabulary(policy: nn.Module, reference: nn.Module) -> None:
    mine, theirs = _vocab_size(policy), _vocab_size(reference)
    if mine is not None and theirs is not None and mine != theirs:
        raise ValueError(
            f"policy.reference_name_or_path: the reference's vocabulary has {theirs} tokens, the policy's "
            f"{mine}; the KL compares log-probs of the same token ids, so both need one tokenizer"
        )
