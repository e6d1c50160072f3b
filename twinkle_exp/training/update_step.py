"""The gradient of one optimizer step: forward, loss and backward of each of its micro-batches.

The losses are normalised by the global step's totals (sequences and completion tokens over every rank),
and DDP and FSDP2 average the ranks' gradients, so each rank's loss is scaled by the number of ranks: the
averaged gradient is then the gradient of the global batch's loss, whatever the ranks' shares of sequences
and tokens (docs/scaling-out.md).

A rollout correction (`optim.rollout_correction`) weighs each micro-batch's policy term by
pi_old / pi_sampler, the recomputed old log-probs against the sampler's (`loss/rollout_correction.py`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from twinkle_exp.lifecycle.nonfinite import NonFiniteGuard
from twinkle_exp.loss import LossFn
from twinkle_exp.parallel import collectives
from twinkle_exp.policy.logprobs import sequence_logps
from twinkle_exp.policy.shared_prefix import SharedPrefix
from twinkle_exp.training.micro_loss import LossExtras, micro_batch_loss
from twinkle_exp.training.step_metrics import StepMetrics
from twinkle_exp.training.update_plan import UpdatePlan


def accumulate_gradients(
    policy: torch.nn.Module,
    loss_fn: LossFn,
    plan: UpdatePlan,
    parts: list[tuple[torch.Tensor, SharedPrefix | None]],
    *,
    temperature: float,
    guard: NonFiniteGuard,
    backward: Callable[[torch.Tensor], None],
    sampler_gap: bool,
    extras: LossExtras | None = None,
) -> StepMetrics:
    """Run `parts` of `plan.rollout` (the step's micro-batches: `[b]` long rows on the model's device, and
    their shared prompts) through `policy` and `loss_fn`, calling `backward` on each micro-batch's loss.

    `guard` watches the log-probs and losses for non-finite values; `sampler_gap` also measures the
    sampler's log-probs against these (a rollout's first step, before any update). `extras`: the rollout
    correction and per-token advantages the loss is called with (`micro_loss.py`; None: neither).
    Returns the step's metrics, not yet read off the device.
    """
    b = plan.rollout
    device = parts[0][0].device
    mask = b.completion_mask
    rows = torch.cat([part for part, _ in parts])
    seqs, tokens = collectives.step_totals(len(rows), int(mask[rows].sum()), device)
    totals = {"num_sequences": seqs, "num_tokens": tokens}
    ranks = collectives.world_size()
    # The plan holds the global batch's advantages: this rank trains on its own rows' share.
    advantages = plan.adv.advantages.tensor_split(ranks)[collectives.rank()].to(device)
    stats = StepMetrics()
    extras = extras or LossExtras()
    for part, prefix in parts:
        logps, entropy = sequence_logps(
            policy,
            b.input_ids[part],
            b.attention_mask[part],
            b.position_ids[part],
            b.labels[part],
            temperature=temperature,
            with_entropy=True,
            entropy_grad=loss_fn.entropy_grad,  # only then: it holds [b, T, V] logits
            prefix=prefix,
        )
        # masked_fill, not logps[mask]: boolean indexing would wait for the GPU on every micro-batch.
        guard.watch("log-prob", logps.detach().masked_fill(~mask[part], 0.0))
        out, weight_metrics = micro_batch_loss(
            loss_fn, plan, part, logps, entropy, advantages[part], totals, extras
        )
        guard.watch("loss", out.loss)
        backward(out.loss * ranks)
        gap = logps.detach() - b.old_logps[part] if sampler_gap else None
        stats.add_micro(out, mask[part], entropy.detach(), gap, weight_metrics)
    return stats
