"""Log-prob passes that run each distinct prompt once equal the full forward, values and gradients."""

from __future__ import annotations

import pytest
import torch
from hf_helpers import tiny_mistral, tiny_qwen2, with_lora
from sampling_helpers import EosAtPosition

from twinkle_exp.models import CharTokenizer, TinyCausalLM, build_tiny_hf_model
from twinkle_exp.policy import shared_prefix
from twinkle_exp.policy.logprobs import sequence_logps
from twinkle_exp.policy.shared_prefix import PrefixIndex, can_share, should_share
from twinkle_exp.sampling.generate import SamplingOptions, generate

TEMPERATURE = 1.3
TOKENIZER = CharTokenizer()
# Ragged prompts (left padding), one repeated across groups, so rows share prompts within and across groups.
PROMPTS = ["12+34=", "7+8=", "12+34=", "abc"]


def tiny():
    torch.manual_seed(0)
    return TinyCausalLM(TOKENIZER.vocab_size, d_model=16, n_layers=2, n_heads=2, max_seq_len=32, dropout=0.0)


def qwen2_tied():
    pytest.importorskip("transformers")
    return tiny_qwen2(TOKENIZER.vocab_size)


def llama_lora():
    pytest.importorskip("peft")
    model = build_tiny_hf_model(TOKENIZER.vocab_size, hidden_size=16, intermediate_size=32, num_heads=2)
    return with_lora(model, ["q_proj", "v_proj"])


def rollout(model, max_new_tokens: int = 5):
    """Rows of the 6-character prompt end after 2 tokens (absolute position 8), the others run on: the
    completions are ragged, with padding after the early ends."""
    gen = torch.Generator().manual_seed(0)
    return generate(
        EosAtPosition(model, stop=8),
        TOKENIZER,
        PROMPTS,
        SamplingOptions(max_new_tokens=max_new_tokens, group_size=3, temperature=4.0),
        generator=gen,
    )


def logps_and_grads(model, b, rows, prefix):
    params = [p for p in model.parameters() if p.requires_grad]
    args = [t[rows] for t in (b.input_ids, b.attention_mask, b.position_ids, b.labels)]
    logps, entropy = sequence_logps(model, *args, temperature=TEMPERATURE, with_entropy=True, prefix=prefix)
    upstream = torch.randn(logps.shape, dtype=logps.dtype, generator=torch.Generator().manual_seed(1))
    return logps, entropy, torch.autograd.grad((logps * upstream).sum(), params)


# transformers' RMSNorm computes in float32 even in a float64 model, so the order in which the rows'
# gradients are summed (per row, or once per shared prompt) shows at float32's precision there.
@pytest.mark.parametrize(
    "build, grad_tol", [(tiny, 1e-10), (qwen2_tied, 1e-6), (llama_lora, 1e-6)], ids=["tiny", "qwen2", "lora"]
)
@pytest.mark.parametrize("max_new_tokens", [5, 1])
def test_shared_prefix_equals_the_full_forward(build, grad_tol, max_new_tokens):
    model = build().double().eval()
    b = rollout(model, max_new_tokens)
    completion_columns = b.completion_mask[:, PrefixIndex.of(b).width :]
    assert max_new_tokens == 1 or not completion_columns.all(), "some rows should end early, leaving padding"
    rows = torch.tensor([5, 0, 1, 7, 8, 11, 2, 3, 6])  # a shuffled minibatch, as the update draws them
    prefix = PrefixIndex.of(b).for_rows(rows, "cpu")
    assert prefix is not None and len(prefix.first) == 3  # "12+34=" (in two groups), "7+8=", "abc"
    assert can_share(model)
    logps, entropy, grads = logps_and_grads(model, b, rows, prefix)
    ref_logps, ref_entropy, ref_grads = logps_and_grads(model, b, rows, None)
    torch.testing.assert_close(logps, ref_logps, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-10, rtol=1e-10)
    for g, ref in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, ref, atol=grad_tol, rtol=grad_tol)


def test_the_prompt_goes_through_the_model_once_per_distinct_prompt():
    model = tiny().eval()
    b = rollout(model)
    width, n, t = PrefixIndex.of(b).width, *b.input_ids.shape
    tokens = []
    model.tok_emb.register_forward_hook(lambda _m, args, _out: tokens.append(args[0].numel()))
    prefix = PrefixIndex.of(b).for_rows(None, "cpu")
    sequence_logps(model, b.input_ids, b.attention_mask, b.position_ids, b.labels, prefix=prefix)
    assert sum(tokens) == 3 * width + n * (t - width - 1)  # 3 distinct prompts, then the completions
    tokens.clear()
    sequence_logps(model, b.input_ids, b.attention_mask, b.position_ids, b.labels)
    assert sum(tokens) == n * t


def test_prefix_index():
    model = tiny().eval()
    b = rollout(model)
    index = PrefixIndex.of(b)
    assert index.width == b.input_ids.shape[1] - (b.labels != -100).sum(1).max()
    prefix = index.for_rows(None, "cpu")
    shared = b.input_ids[:, : index.width]
    assert torch.equal(shared[prefix.first][prefix.source], shared)
    assert prefix.saves
    assert not index.for_rows(torch.tensor([0, 3, 9]), "cpu").saves  # three prompts of their own
    same = index.for_rows(torch.tensor([0, 6]), "cpu")  # the same prompt in two groups
    assert len(same.first) == 1 and same.saves


def test_checkpointing_layers_and_sliding_windows_take_the_full_forward():
    pytest.importorskip("transformers")
    from twinkle_exp.models.hf import enable_gradient_checkpointing, set_update_mode

    model = build_tiny_hf_model(TOKENIZER.vocab_size, hidden_size=16, intermediate_size=32, num_heads=2)
    assert can_share(model)
    enable_gradient_checkpointing(model)
    set_update_mode(model, dropout=False)  # the update: its checkpointed layers train, and drop a cache
    assert not can_share(model)
    model.eval()  # the no-grad passes (old log-probs, reference) do not checkpoint: they share
    assert can_share(model)
    assert not can_share(tiny_mistral(TOKENIZER.vocab_size, sliding_window=4))


@pytest.mark.parametrize("max_new_tokens", [1, 5])
def test_a_sharded_model_makes_the_same_passes_whatever_its_rows(max_new_tokens, monkeypatch):
    """Under FSDP2 every rank must run the model as often as the others: a sharded model shares even rows
    with prompts of their own, and runs a second pass over a single completion column, with unchanged
    results. (The 2-process FSDP2 runs of test_data_parallel.py check the collectives themselves.)"""
    model = tiny().double().eval()
    b = rollout(model, max_new_tokens)
    own = torch.tensor([0, 3, 9])  # three prompts of their own
    prefix = PrefixIndex.of(b).for_rows(own, "cpu")
    assert not should_share(model, prefix)
    passes = []
    model.blocks[0].register_forward_hook(lambda *_: passes.append(1))
    logps, _, grads = logps_and_grads(model, b, own, None)
    assert len(passes) == 1
    monkeypatch.setattr(shared_prefix, "is_sharded", lambda m: True)
    assert should_share(model, prefix)
    passes.clear()
    shared_logps, _, shared_grads = logps_and_grads(model, b, own, prefix)
    assert len(passes) == 2  # the prompts, then the completion columns (one of them, or more)
    torch.testing.assert_close(shared_logps, logps, atol=1e-10, rtol=1e-10)
    for g, ref in zip(shared_grads, grads, strict=True):
        torch.testing.assert_close(g, ref, atol=1e-10, rtol=1e-10)
