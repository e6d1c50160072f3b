"""The chunked selective log-softmax agrees with the naive log_softmax + gather, values and gradients."""

from __future__ import annotations

import pytest
import torch

from twinkle_exp.logprobs import IGNORE_INDEX, selective_log_softmax, shift_logits_to_labels, token_entropy


def naive(logits, labels, temperature=1.0):
    logp = torch.log_softmax(logits.double() / temperature, dim=-1)
    out = logp.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)
    return out.masked_fill(labels == IGNORE_INDEX, 0.0)


@pytest.mark.parametrize("chunk", [1, 3, 1024])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_matches_naive(chunk, temperature):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 13, generator=gen, requires_grad=True)
    labels = torch.randint(0, 13, (3, 7), generator=gen)
    labels[0, :2] = IGNORE_INDEX
    out = selective_log_softmax(logits, labels, temperature=temperature, chunk_tokens=chunk)
    ref_logits = logits.detach().clone().requires_grad_(True)
    ref = naive(ref_logits, labels, temperature)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    weights = torch.randn(3, 7, generator=gen)
    (out * weights).sum().backward()
    (ref * weights.double()).sum().backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad.float(), atol=1e-5, rtol=1e-5)


def test_gradcheck_float64():
    logits = torch.randn(2, 5, 7, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 7, (2, 5))
    labels[1, 0] = IGNORE_INDEX
    assert torch.autograd.gradcheck(
        lambda x: selective_log_softmax(x, labels, temperature=0.8, chunk_tokens=3), (logits,)
    )


def test_bfloat16_logits_give_float32_logps_and_bf16_grad():
    logits = torch.randn(2, 4, 9).to(torch.bfloat16).requires_grad_(True)
    labels = torch.randint(0, 9, (2, 4))
    out = selective_log_softmax(logits, labels)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), naive(logits.detach().float(), labels), atol=1e-5, rtol=0)
    out.sum().backward()
    assert logits.grad.dtype == torch.bfloat16


def test_shift_aligns_logits_with_next_label():
    logits = torch.randn(1, 4, 6)
    labels = torch.tensor([[IGNORE_INDEX, 2, 5, 1]])
    out = shift_logits_to_labels(logits, labels)
    assert out[0, 0] == 0
    for t in range(1, 4):
        expected = torch.log_softmax(logits[0, t - 1], -1)[labels[0, t]]
        torch.testing.assert_close(out[0, t], expected)


def test_entropy():
    logits = torch.zeros(2, 3, 8)  # uniform -> log 8
    torch.testing.assert_close(
        token_entropy(logits, chunk_tokens=2), torch.full((2, 3), torch.log(torch.tensor(8.0)))
    )
    peaked = torch.tensor([[[100.0, 0.0, 0.0]]])
    assert token_entropy(peaked).item() == pytest.approx(0.0, abs=1e-6)


def test_rejects_mismatched_shapes_and_temperature():
    with pytest.raises(ValueError, match="logits"):
        selective_log_softmax(torch.zeros(2, 3, 4), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature"):
        selective_log_softmax(torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.long), temperature=0)


@pytest.mark.parametrize("chunk", [None, 2, 5])
def test_entropy_matches_naive_with_temperature(chunk):
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(2)) * 3
    logp = torch.log_softmax(logits.double() / 0.7, dim=-1)
    expected = -(logp.exp() * logp).sum(-1)
    out = token_entropy(logits, temperature=0.7, chunk_tokens=chunk)
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)
