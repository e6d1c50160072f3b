"""Log-probs from hidden states and the head equal the logits path: values, entropy and gradients (fp64)."""

from __future__ import annotations

import pytest
import torch

from twinkle_exp.logprobs import IGNORE_INDEX, hidden_log_probs, shift_hidden_to_labels

N_ROWS, T, H, V = 3, 7, 5, 13


def logits_path(hidden, weight, labels, bias=None, temperature=1.0):
    """The reference: full logits, then log_softmax + gather and the entropy, in float64."""
    logits = (hidden @ weight.T + (0 if bias is None else bias)).double() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logps = logp_all.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    ignored = labels == IGNORE_INDEX
    return logps.masked_fill(ignored, 0.0), entropy.masked_fill(ignored, 0.0)


def ragged_labels(gen):
    labels = torch.randint(0, V, (N_ROWS, T), generator=gen)
    labels[0, :3] = IGNORE_INDEX  # a prompt
    labels[1, 5:] = IGNORE_INDEX  # padding after an early EOS
    labels[2, 0] = IGNORE_INDEX
    return labels


def leaves(gen, *, bias: bool, head_grad: bool):
    hidden = torch.randn(N_ROWS, T, H, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(V, H, generator=gen, dtype=torch.float64, requires_grad=head_grad)
    b = torch.randn(V, generator=gen, dtype=torch.float64, requires_grad=head_grad) if bias else None
    return hidden, weight, b


def clone_leaf(t):
    return None if t is None else t.detach().clone().requires_grad_(t.requires_grad)


# chunks (tokens, vocab): (4, 5) divides neither 15 labelled tokens nor V = 13; (1, 1) is the extreme;
# (None) the defaults, one tile.
CHUNKS = [(4, 5), (1, 1), (16, None)]


@pytest.mark.parametrize("chunk_tokens, chunk_vocab", CHUNKS)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("head_grad", [True, False], ids=["trained_head", "frozen_head"])
def test_values_entropy_and_gradients_match_the_logits_path(
    chunk_tokens, chunk_vocab, temperature, bias, head_grad
):
    gen = torch.Generator().manual_seed(0)
    labels = ragged_labels(gen)
    hidden, weight, b = leaves(gen, bias=bias, head_grad=head_grad)
    logps, entropy = hidden_log_probs(
        hidden,
        weight,
        labels,
        bias=b,
        temperature=temperature,
        with_entropy=True,
        chunk_tokens=chunk_tokens,
        chunk_vocab=chunk_vocab,
    )
    ref_hidden, ref_weight, ref_b = clone_leaf(hidden), clone_leaf(weight), clone_leaf(b)
    ref_logps, ref_entropy = logits_path(ref_hidden, ref_weight, labels, ref_b, temperature)
    torch.testing.assert_close(logps, ref_logps, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-12, rtol=1e-12)
    assert not entropy.requires_grad

    upstream = torch.randn(N_ROWS, T, generator=gen, dtype=torch.float64)
    (logps * upstream).sum().backward()
    (ref_logps * upstream).sum().backward()
    torch.testing.assert_close(hidden.grad, ref_hidden.grad, atol=1e-12, rtol=1e-12)
    for mine, ref in ((weight, ref_weight), (b, ref_b)):
        if mine is not None and head_grad:
            torch.testing.assert_close(mine.grad, ref.grad, atol=1e-12, rtol=1e-12)
    assert (logps[labels == IGNORE_INDEX] == 0).all()


@pytest.mark.parametrize("head_grad", [True, False], ids=["trained_head", "frozen_head"])
def test_gradcheck_float64(head_grad):
    gen = torch.Generator().manual_seed(1)
    labels = ragged_labels(gen)
    hidden, weight, b = leaves(gen, bias=True, head_grad=head_grad)
    inputs = (hidden, weight, b) if head_grad else (hidden,)

    def fn(h, w=weight, bias=b):
        return hidden_log_probs(h, w, labels, bias=bias, temperature=0.8, chunk_tokens=4, chunk_vocab=5)[0]

    assert torch.autograd.gradcheck(fn, inputs)


def test_tied_head_gradient_sums_both_uses_of_the_embedding():
    """A tied head is the embedding matrix: its gradient gathers the input and the output use."""
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, V, (N_ROWS, T), generator=gen)
    labels = ragged_labels(gen)
    embedding = torch.randn(V, H, generator=gen, dtype=torch.float64, requires_grad=True)
    mix = torch.randn(H, H, generator=gen, dtype=torch.float64)
    ref_embedding = clone_leaf(embedding)

    def hidden_of(emb):
        return torch.tanh(emb[ids] @ mix)  # [B, T, H] a stand-in for the transformer

    logps, _ = hidden_log_probs(
        hidden_of(embedding), embedding, labels, temperature=0.9, chunk_tokens=4, chunk_vocab=5
    )
    ref_logps, _ = logits_path(hidden_of(ref_embedding), ref_embedding, labels, temperature=0.9)
    logps.sum().backward()
    ref_logps.sum().backward()
    torch.testing.assert_close(logps, ref_logps, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(embedding.grad, ref_embedding.grad, atol=1e-12, rtol=1e-12)


def test_shift_aligns_hidden_state_t_with_label_t_plus_1():
    gen = torch.Generator().manual_seed(3)
    hidden, weight, _ = leaves(gen, bias=False, head_grad=True)
    labels = ragged_labels(gen)
    logps, entropy = shift_hidden_to_labels(hidden, weight, labels, with_entropy=True)
    ref_logps, ref_entropy = logits_path(hidden[:, :-1], weight, labels[:, 1:])
    assert logps.shape == entropy.shape == labels.shape
    assert (logps[:, 0] == 0).all() and (entropy[:, 0] == 0).all()
    torch.testing.assert_close(logps[:, 1:], ref_logps)
    torch.testing.assert_close(entropy[:, 1:], ref_entropy)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_close_to_float64_and_grads_in_input_dtype(dtype):
    gen = torch.Generator().manual_seed(4)
    labels = ragged_labels(gen)
    hidden64, weight64, _ = leaves(gen, bias=False, head_grad=True)
    hidden = hidden64.detach().to(dtype).requires_grad_(True)
    weight = weight64.detach().to(dtype).requires_grad_(True)
    logps, _ = hidden_log_probs(hidden, weight, labels, chunk_tokens=4, chunk_vocab=5)
    assert logps.dtype == torch.float32
    # the reference sees the same rounded inputs and, like lm_head, rounds the logits to the input dtype
    logits = (hidden.detach() @ weight.detach().T).double()
    ref = torch.log_softmax(logits, -1).gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)
    torch.testing.assert_close(
        logps.double(), ref.masked_fill(labels == IGNORE_INDEX, 0), atol=1e-5, rtol=1e-5
    )
    logps.sum().backward()
    assert hidden.grad.dtype == weight.grad.dtype == dtype


def test_no_grad_and_no_labels():
    gen = torch.Generator().manual_seed(5)
    hidden, weight, _ = leaves(gen, bias=False, head_grad=True)
    labels = ragged_labels(gen)
    with torch.no_grad():
        logps, entropy = hidden_log_probs(hidden, weight, labels, with_entropy=True)
    torch.testing.assert_close((logps, entropy), logits_path(hidden.detach(), weight.detach(), labels))
    none, _ = hidden_log_probs(hidden, weight, torch.full_like(labels, IGNORE_INDEX))
    assert (none == 0).all()


def test_rejects_bad_arguments_by_name():
    hidden, weight = torch.zeros(2, 3, H), torch.zeros(V, H)
    labels = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="labels"):
        hidden_log_probs(hidden, weight, labels[:, :2])
    with pytest.raises(ValueError, match="weight"):
        hidden_log_probs(hidden, torch.zeros(V, H + 1), labels)
    with pytest.raises(ValueError, match="bias"):
        hidden_log_probs(hidden, weight, labels, bias=torch.zeros(V + 1))
    with pytest.raises(ValueError, match="temperature"):
        hidden_log_probs(hidden, weight, labels, temperature=0)
    with pytest.raises(ValueError, match="chunk_tokens"):
        hidden_log_probs(hidden, weight, labels, chunk_tokens=0)
    with pytest.raises(ValueError, match="chunk_vocab"):
        hidden_log_probs(hidden, weight, labels, chunk_vocab=0)
    with pytest.raises(ValueError, match="dtype"):
        hidden_log_probs(hidden, weight.double(), labels)


def test_autocast_runs_the_head_in_the_autocast_dtype():
    """Under bf16 autocast a model hands over bf16 hidden states while the head stays float32: the tiles run
    the matmul in bf16, as `lm_head` would, and each input gets its gradient in its own dtype."""
    gen = torch.Generator().manual_seed(6)
    labels = ragged_labels(gen)
    hidden = torch.randn(N_ROWS, T, H, generator=gen).bfloat16().requires_grad_(True)
    weight = torch.randn(V, H, generator=gen, requires_grad=True)
    with pytest.raises(ValueError, match="dtype"):
        hidden_log_probs(hidden, weight, labels)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logps, _ = hidden_log_probs(hidden, weight, labels, chunk_tokens=4, chunk_vocab=5)
        logits = torch.nn.functional.linear(hidden, weight)
    assert logits.dtype == torch.bfloat16
    ref = torch.log_softmax(logits.float(), -1).gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)
    torch.testing.assert_close(logps, ref.masked_fill(labels == IGNORE_INDEX, 0), atol=1e-5, rtol=1e-5)
    logps.sum().backward()
    assert hidden.grad.dtype == torch.bfloat16 and weight.grad.dtype == torch.float32
