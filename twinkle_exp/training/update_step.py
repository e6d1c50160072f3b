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
    step_rows: torch.Tensor | None = None,
) -> StepMetrics:
    """Run `parts` of `plan.rollout` (the step's micro-batches: `[b]` long rows on the model's device, and
    their shared prompts) through `policy` and `loss_fn`, calling `backward` on each micro-batch's loss.

    `step_rows` (`[n]` long; default: the parts' rows) are the step's rows whose totals normalise the loss:
    more than the parts' when rows that add nothing to the gradient were left out (optim.skip_zero_advantage).
    With no parts at all every trained parameter gets a zero gradient, so the optimizer steps as it would on
    the whole step's (zero) gradient. Each micro-batch runs only up to its rows' last labelled column.

    `guard` watches the log-probs and losses for non-finite values; `sampler_gap` also measures the
    sampler's log-probs against these (a rollout's first step, before any update). `extras`: the rollout
    correction and per-token advantages the loss is called with (`micro_loss.py`; None: neither).
    Returns the step's metrics, not yet read off the device.
    """
    b = plan.rollout
    mask = b.completion_mask
    rows = torch.cat([part for part, _ in parts]) if step_rows is None else step_rows
    device = rows.device
    seqs, tokens = collectives.step_totals(len(rows), int(mask[rows].sum()), device)
    totals = {"num_sequences": seqs, "num_tokens": tokens}
    ranks = collectives.world_size()
    # The plan holds the global batch's advantages: this rank trains on its own rows' share.
    advantages = plan.adv.advantages.tensor_split(ranks)[collectives.rank()].to(device)
    stats = StepMetrics()
    extras = extras or LossExtras()
    if not parts:
        _zero_gradients(policy)
    for part, prefix in parts:
        logps, entropy = _trimmed_logps(policy, loss_fn, plan, part, prefix, temperature)
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


def _trimmed_logps(
    policy: torch.nn.Module,
    loss_fn: LossFn,
    plan: UpdatePlan,
    part: torch.Tensor,
    prefix: SharedPrefix | None,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`[b, T]` log-probs and entropies of the rows `part` (`[b]` long), from a pass over their own columns
    only (`UpdatePlan.label_ends`), zero-padded back to the rollout's width T for the loss."""
    b = plan.rollout
    width, full = int(plan.label_ends[part.cpu()].max()), b.input_ids.shape[1]
    logps, entropy = sequence_logps(
        policy,
        b.input_ids[part, :width],
        b.attention_mask[part, :width],
        b.position_ids[part, :width],
        b.labels[part, :width],
        temperature=temperature,
        with_entropy=True,
        entropy_grad=loss_fn.entropy_grad,  # only then: it holds [b, T, V] logits
        prefix=prefix,
    )
    pad = (0, full - width)
    return torch.nn.functional.pad(logps, pad), torch.nn.functional.pad(entropy, pad)


def _zero_gradients(policy: torch.nn.Module) -> None:
    """A zero gradient on every trained parameter: AdamW then decays its moments and steps, as it does on a
    gradient of zeros, where a missing gradient would leave the parameter and its moments alone."""
    for p in policy.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
