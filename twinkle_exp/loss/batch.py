"""Turn the loss's inputs (padded or packed, logits or log-probs) into one checked token layout.

Every variant sees the same `TokenBatch`, so packing, alignment and shape checks happen once, here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from twinkle_exp.logprobs.logits import IGNORE_INDEX, shift_logits_to_labels


@dataclass
class TokenBatch:
    logps: torch.Tensor  # [B, T] current log-probs of labels, with grad; 0 off the mask
    old_logps: torch.Tensor  # [B, T] sampling policy's log-probs (logps.detach() when on-policy)
    ref_logps: torch.Tensor | None  # [B, T] reference log-probs, or None
    advantages: torch.Tensor  # [B, T] per-token advantages (per-sequence ones broadcast)
    mask: torch.Tensor  # [B, T] bool, completion tokens that have a prediction
    seq_ids: torch.Tensor  # [B, T] long, index of the sequence each token belongs to
    num_seqs: int  # sequences in this (micro-)batch
    entropies: torch.Tensor | None = (
        None  # [B, T] entropy of the distribution each label was drawn from; 0 off the mask
    )
    weights: torch.Tensor | None = (
        None  # [B, T] per-token weight on the policy term (rollout correction); 0 off the mask
    )
    sampler_logps: torch.Tensor | None = None  # [B, T] the sampler's log-probs of the labels; 0 off the mask
    rejected_seqs: int = 0  # sequences whose every completion token `rollout_mask` removed
    # [B, T] bool: the tokens the switches keep for the policy term (set by the pipeline before the objective)
    policy_keep: torch.Tensor | None = None
    # [num_seqs] long: the group (prompt) each sequence was sampled for, or None when the caller did not say
    group_ids: torch.Tensor | None = None

    @property
    def counted_seqs(self) -> int:
        """The sequences the default normalisers count: all but those the rollout correction rejected."""
        return self.num_seqs - self.rejected_seqs

    @property
    def num_tokens(self) -> int:
        return int(self.mask.sum())


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _check_like(name: str, tensor: torch.Tensor | None, labels: torch.Tensor) -> None:
    if tensor is not None and tensor.shape != labels.shape:
        raise ValueError(f"{name} has shape {_shape(tensor)} but labels has shape {_shape(labels)}")


def sequence_starts(labels: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """`[B, T]` bool, True at the first token of every sequence.

    Without `position_ids` each row is one sequence. With them, a sequence starts wherever the position
    restarts at 0, so a packed row holds several sequences and none of them sees another's tokens.
    """
    if position_ids is None:
        starts = torch.zeros_like(labels, dtype=torch.bool)
        starts[:, 0] = True
        return starts
    _check_like("position_ids", position_ids, labels)
    if labels.shape[1] and bool((position_ids[:, 0] != 0).any()):
        rows = (position_ids[:, 0] != 0).nonzero().flatten().tolist()
        raise ValueError(f"packed input: position_ids must start at 0 in every row; rows {rows} do not")
    return position_ids == 0


def sequence_ids(starts: torch.Tensor) -> tuple[torch.Tensor, int]:
    """`[B, T]` long index of the sequence each token belongs to (row-major order, padded and packed rows
    alike), and the number of sequences, from `sequence_starts`' `[B, T]` bool."""
    return starts.reshape(-1).long().cumsum(0).reshape(starts.shape) - 1, int(starts.sum())


def _completion_mask(labels: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    # A sequence's first token has nothing before it to predict it from; masking it keeps packed == padded.
    return (labels != IGNORE_INDEX) & ~starts


def completion_mask(labels: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """`[B, T]` bool: the tokens the loss scores (labelled, and not a sequence's first token).

    The one definition of "completion token": the loss's normalisers and the trainer's step totals and
    token-weighted metrics all count these.
    """
    return _completion_mask(labels, sequence_starts(labels, position_ids))


def prepare_batch(
    *,
    labels: torch.Tensor,
    advantages: torch.Tensor,
    logits: torch.Tensor | None = None,
    logps: torch.Tensor | None = None,
    old_logps: torch.Tensor | None = None,
    ref_logps: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    entropies: torch.Tensor | None = None,
    rollout_weights: torch.Tensor | None = None,
    sampler_logps: torch.Tensor | None = None,
    rollout_mask: torch.Tensor | None = None,
    group_index: torch.Tensor | None = None,
    entropy_from_logits: bool = False,
) -> TokenBatch:
    """Check and align the inputs.

    Args:
        labels: `[B, T]` unshifted token ids, -100 on prompt and padding.
        advantages: `[num_sequences]` (one per sequence) or `[B, T]` (per token).
        logits: `[B, T, V]`; `logits[:, t]` predicts `labels[:, t + 1]`. Exclusive with `logps`.
        logps: `[B, T]` precomputed, `logps[:, t]` = log-prob of `labels[:, t]`.
        old_logps, ref_logps: `[B, T]` aligned like `logps`.
        position_ids: `[B, T]`, restarting at 0 at every sequence start (packed input).
        entropies: `[B, T]` aligned like `logps`, the policy's entropy at each label (with grad for an
            entropy bonus); computed from `logits` when None and `entropy_from_logits`.
        rollout_weights: `[B, T]` a per-token weight on the policy term, e.g. `rollout_correction`'s.
        sampler_logps: `[B, T]` the sampler's log-probs of the labels, where they differ from `old_logps`
            (the off-policy mask measures its gap against them).
        rollout_mask: `[B, T]` bool, the tokens a rejecting rollout correction keeps (verl's form of
            `seq_mask`): the others leave the batch, from every term and from the default counts.
        group_index: `[num_sequences]` long, the group (prompt) each sequence was sampled for: the objectives
            that compare a sequence with its group (GVPO) read it.
    """
    if labels.dim() != 2:
        raise ValueError(f"labels must be [B, T], got shape {_shape(labels)}")
    if labels.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"labels must hold integer token ids, got dtype {labels.dtype}")
    if (logits is None) == (logps is None):
        raise ValueError("pass exactly one of logits [B, T, V] or logps [B, T]")
    if logits is not None:
        if logits.dim() != 3 or logits.shape[:2] != labels.shape:
            raise ValueError(
                f"logits has shape {_shape(logits)}; expected [B, T, V] with [B, T] = {_shape(labels)}"
            )
        valid = labels[labels != IGNORE_INDEX]
        if valid.numel() and (int(valid.min()) < 0 or int(valid.max()) >= logits.shape[-1]):
            raise ValueError(
                f"labels hold ids outside the vocabulary [0, {logits.shape[-1]}) and are not -100"
            )
        logps = shift_logits_to_labels(logits, labels)
        if entropies is None and entropy_from_logits:
            entropies = _entropy_with_grad(logits)
    else:
        _check_like("logps", logps, labels)
    _check_like("old_logps", old_logps, labels)
    _check_like("ref_logps", ref_logps, labels)
    _check_like("entropies", entropies, labels)
    _check_like("rollout_weights", rollout_weights, labels)
    _check_like("sampler_logps", sampler_logps, labels)
    _check_like("rollout_mask", rollout_mask, labels)

    starts = sequence_starts(labels, position_ids)
    seq_ids, num_seqs = sequence_ids(starts)
    mask = _completion_mask(labels, starts)
    rejected_seqs = 0
    if rollout_mask is not None:
        kept = mask & rollout_mask.bool()
        had = torch.bincount(seq_ids[mask], minlength=num_seqs) > 0
        has = torch.bincount(seq_ids[kept], minlength=num_seqs) > 0
        rejected_seqs, mask = int((had & ~has).sum()), kept
    if group_index is not None and tuple(group_index.shape) != (num_seqs,):
        raise ValueError(
            f"group_index has shape {_shape(group_index)}; expected [{num_seqs}], one group per sequence"
        )
    if advantages.shape == labels.shape:
        token_adv = advantages
    elif advantages.dim() == 1:
        if advantages.shape[0] != num_seqs:
            raise ValueError(
                f"advantages has {advantages.shape[0]} entries but the batch holds {num_seqs} sequences"
            )
        token_adv = advantages[seq_ids]
    else:
        raise ValueError(
            f"advantages has shape {_shape(advantages)}; expected [{num_seqs}] (per sequence) "
            f"or {_shape(labels)} (per token)"
        )
    logps = logps.masked_fill(~mask, 0.0)
    old = logps.detach() if old_logps is None else old_logps.to(logps.dtype).masked_fill(~mask, 0.0)
    ref = None if ref_logps is None else ref_logps.to(logps.dtype).masked_fill(~mask, 0.0)
    return TokenBatch(
        logps=logps,
        old_logps=old,
        ref_logps=ref,
        advantages=token_adv.to(logps.dtype).masked_fill(~mask, 0.0),
        mask=mask,
        seq_ids=seq_ids,
        num_seqs=num_seqs,
        entropies=None if entropies is None else entropies.to(logps.dtype).masked_fill(~mask, 0.0),
        weights=None if rollout_weights is None else rollout_weights.to(logps.dtype).masked_fill(~mask, 0.0),
        sampler_logps=None
        if sampler_logps is None
        else sampler_logps.to(logps.dtype).masked_fill(~mask, 0.0),
        rejected_seqs=rejected_seqs,
        group_ids=None if group_index is None else group_index.long(),
    )


def _entropy_with_grad(logits: torch.Tensor) -> torch.Tensor:
    """`[B, T, V]` -> `[B, T]` entropy aligned with unshifted labels (position 0 gets 0), differentiable."""
    logp = torch.log_softmax(logits[:, :-1].to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return torch.nn.functional.pad(entropy, (1, 0), value=0.0)
