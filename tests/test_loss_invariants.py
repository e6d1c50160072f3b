"""Properties every variant must keep: REINFORCE on-policy, finite differences, packing, micro-batching."""

from __future__ import annotations

import pytest
import torch
from loss_helpers import ALL_LOSSES, IGN, make_loss, random_padded_batch

from twinkle_exp.logprobs import shift_logits_to_labels
from twinkle_exp.loss import GRPOLoss, GSPOLoss, SAPOLoss, kl_penalty
from twinkle_exp.loss import metric_keys as K

LENGTHS = [3, 1, 5, 2]


def reinforce_weights(name: str, mask: torch.Tensor) -> torch.Tensor:
    """`[B, T]` normaliser of -A logp in each variant's on-policy gradient."""
    per_seq = mask.sum(1, keepdim=True).double()
    num_seqs, num_tokens = mask.shape[0], mask.sum()
    if name in ("grpo", "gspo", "sapo"):
        return mask / (num_seqs * per_seq)
    if name in ("bnpo", "cispo"):
        return mask / num_tokens
    return mask / (num_seqs * 6)  # drgrpo, budget 6 from make_loss


@pytest.mark.parametrize("name", ALL_LOSSES)
def test_on_policy_gradient_is_reinforce(name):
    b = random_padded_batch(LENGTHS)
    out = make_loss(name, clip_range=0.2)(logits=b["logits"], labels=b["labels"], advantages=b["advantages"])
    (grad,) = torch.autograd.grad(out.loss, b["logits"])
    logps = shift_logits_to_labels(b["logits"], b["labels"])
    mask = b["labels"] != IGN
    surrogate = -(reinforce_weights(name, mask) * b["advantages"][:, None] * logps).sum()
    (expected,) = torch.autograd.grad(surrogate, b["logits"])
    torch.testing.assert_close(grad, expected)
    for key in (K.CLIP_LOW, K.CLIP_HIGH, K.CLIP_REGION):
        assert out.metrics[key].item() == 0.0
    assert out.metrics[K.RATIO_MEAN].item() == pytest.approx(1.0)


@pytest.mark.parametrize("tau", [0.1, 0.5, 1.0, 3.0])
def test_sapo_at_ratio_one_is_vanilla_policy_gradient(tau):
    b = random_padded_batch(LENGTHS, seed=1)
    out = SAPOLoss(tau=tau)(logits=b["logits"], labels=b["labels"], advantages=b["advantages"])
    grpo = GRPOLoss()(logits=b["logits"], labels=b["labels"], advantages=b["advantages"])
    g_sapo = torch.autograd.grad(out.loss, b["logits"])[0]
    g_grpo = torch.autograd.grad(grpo.loss, b["logits"])[0]
    torch.testing.assert_close(g_sapo, g_grpo)
    # value: the mean over sequences of -(2 / tau) A_i
    assert out.loss.item() == pytest.approx(-(2 / tau) * b["advantages"].mean().item())


def test_on_policy_gspo_has_grpo_gradient():
    b = random_padded_batch(LENGTHS, seed=2)
    kwargs = {"labels": b["labels"], "advantages": b["advantages"]}
    g_gspo = torch.autograd.grad(GSPOLoss()(logits=b["logits"], **kwargs).loss, b["logits"])[0]
    g_grpo = torch.autograd.grad(GRPOLoss()(logits=b["logits"], **kwargs).loss, b["logits"])[0]
    torch.testing.assert_close(g_gspo, g_grpo)


def test_k3_is_never_negative():
    gen = torch.Generator().manual_seed(0)
    logps, ref = torch.randn(10_000, generator=gen) * 5, torch.randn(10_000, generator=gen) * 5
    assert (kl_penalty(logps, ref, "k3") >= 0).all()


@pytest.mark.parametrize("name", ALL_LOSSES)
def test_gradcheck_off_policy_with_kl(name):
    b = random_padded_batch([2, 3], vocab=5, seed=3)
    loss_fn = make_loss(name, clip_range=0.2, beta=0.05)
    # Old log-probs near the current ones put some ratios inside and some outside the clip region.
    with torch.no_grad():
        old = shift_logits_to_labels(b["logits"], b["labels"]) + 0.3 * torch.randn(b["labels"].shape).double()
    old = old * (b["labels"] != IGN)

    def f(logits):
        return loss_fn(
            logits=logits,
            labels=b["labels"],
            advantages=b["advantages"],
            old_logps=old,
            ref_logps=b["ref_logps"],
        ).loss

    if name != "cispo":
        assert torch.autograd.gradcheck(f, (b["logits"],), eps=1e-6, atol=1e-5)
        return
    # CISPO's weight is a stop-gradient, so its gradient is by design not the derivative of its value: it is
    # the derivative of the same objective with the weight frozen at the current point. Check that instead.
    mask = b["labels"] != IGN
    with torch.no_grad():
        weight = (shift_logits_to_labels(b["logits"], b["labels"]) - old).exp().clamp(max=1.2)

    def frozen(logits):
        logps = shift_logits_to_labels(logits, b["labels"])
        per_token = -weight * b["advantages"][:, None] * logps + 0.05 * kl_penalty(
            logps, b["ref_logps"], "k3"
        )
        return (per_token * mask).sum() / mask.sum()

    assert torch.autograd.gradcheck(frozen, (b["logits"],), eps=1e-6, atol=1e-5)
    g_cispo = torch.autograd.grad(f(b["logits"]), b["logits"])[0]
    g_frozen = torch.autograd.grad(frozen(b["logits"]), b["logits"])[0]
    torch.testing.assert_close(g_cispo, g_frozen)


def pack(b):
    """Concatenate each padded row's real tokens into one row with position_ids restarting at 0."""
    mask_rows = [row != IGN for row in b["labels"]]
    ends = [int(m.nonzero().max()) + 1 for m in mask_rows]
    labels = torch.cat([b["labels"][i, :e] for i, e in enumerate(ends)])[None]
    logits = torch.cat([b["logits"][i, :e] for i, e in enumerate(ends)])[None]
    pos = torch.cat([torch.arange(e) for e in ends])[None]
    old = torch.cat([b["old_logps"][i, :e] for i, e in enumerate(ends)])[None]
    ref = torch.cat([b["ref_logps"][i, :e] for i, e in enumerate(ends)])[None]
    return logits, labels, pos, old, ref


@pytest.mark.parametrize("name", ALL_LOSSES)
def test_packed_equals_padded(name):
    b = random_padded_batch(LENGTHS, seed=4)
    loss_fn = make_loss(name, beta=0.04)
    padded = loss_fn(
        logits=b["logits"],
        labels=b["labels"],
        advantages=b["advantages"],
        old_logps=b["old_logps"],
        ref_logps=b["ref_logps"],
    )
    logits, labels, pos, old, ref = pack(b)
    logits = logits.detach().requires_grad_(True)
    packed = loss_fn(
        logits=logits,
        labels=labels,
        advantages=b["advantages"],
        old_logps=old,
        ref_logps=ref,
        position_ids=pos,
    )
    torch.testing.assert_close(packed.loss, padded.loss)
    assert packed.metrics.keys() == padded.metrics.keys()
    for key in padded.metrics:
        torch.testing.assert_close(packed.metrics[key], padded.metrics[key], msg=key)
    g_padded = torch.autograd.grad(padded.loss, b["logits"])[0]
    g_packed = torch.autograd.grad(packed.loss, logits)[0]
    ends = [int((row != IGN).nonzero().max()) + 1 for row in b["labels"]]
    torch.testing.assert_close(g_packed[0], torch.cat([g_padded[i, :e] for i, e in enumerate(ends)]))


@pytest.mark.parametrize("name", ALL_LOSSES)
@pytest.mark.parametrize("split", [[1, 3], [2, 2], [3, 1], [1, 1, 1, 1]])
def test_micro_batches_sum_to_full_batch(name, split):
    b = random_padded_batch(LENGTHS, seed=5)
    loss_fn = make_loss(name, beta=0.04, clip_range=0.1)
    keys = ("labels", "advantages", "old_logps", "ref_logps")
    full = loss_fn(logits=b["logits"], **{k: b[k] for k in keys})
    g_full = torch.autograd.grad(full.loss, b["logits"])[0]
    totals = {"num_sequences": len(LENGTHS), "num_tokens": sum(LENGTHS)}
    total_loss, start = 0.0, 0
    for size in split:
        rows = slice(start, start + size)
        part = loss_fn(logits=b["logits"][rows], **{k: b[k][rows] for k in keys}, **totals)
        total_loss = total_loss + part.loss
        start += size
    g_parts = torch.autograd.grad(total_loss, b["logits"])[0]
    torch.testing.assert_close(total_loss, full.loss)
    torch.testing.assert_close(g_parts, g_full)
