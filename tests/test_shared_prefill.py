"""Shared prefill: each distinct prompt runs through the model once, and sampling is unchanged by it."""

from __future__ import annotations

import pytest
import torch
from hf_helpers import small_qwen2

from twinkle_exp.models import CharTokenizer, TinyCausalLM, build_tiny_hf_model
from twinkle_exp.models.kv_cache import distinct_rows, select_cache_rows
from twinkle_exp.policy.logprobs import sequence_logps
from twinkle_exp.sampling.generate import Decoding, SamplingOptions, generate

TOK = CharTokenizer()
# a repeated prompt, different lengths, one empty (BOS only)
PROMPTS = ["1+2=", "hello world", "1+2=", "", "abc"]
SAMPLING = SamplingOptions(group_size=3, max_new_tokens=6, temperature=0.9, top_p=0.95)


def make_model(kind: str):
    torch.manual_seed(0)
    if kind == "tiny":
        return TinyCausalLM(TOK.vocab_size, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, dropout=0.0)
    if kind == "llama":
        return build_tiny_hf_model(TOK.vocab_size).eval()
    pytest.importorskip("transformers")
    return small_qwen2(TOK.vocab_size).eval()


def prefill_batch_sizes(model) -> list[int]:
    """Records the batch size of every call whose input has more than one position (the prefills)."""
    sizes: list[int] = []

    def hook(_module, args, kwargs):
        ids = args[0] if args else kwargs["input_ids"]
        if ids.shape[1] > 1:
            sizes.append(ids.shape[0])

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return sizes


@pytest.mark.parametrize("kind", ["tiny", "llama", "qwen2"])
def test_same_samples_and_logps_as_prefilling_every_row(kind):
    model = make_model(kind)
    sizes = prefill_batch_sizes(model)
    shared = generate(model, TOK, PROMPTS, SAMPLING, generator=torch.Generator().manual_seed(3))
    every = generate(
        model, TOK, PROMPTS, SAMPLING, generator=torch.Generator().manual_seed(3), decoding=Decoding.PER_ROW
    )
    assert sizes == [4, 15]  # 4 distinct prompts once, against 5 prompts x 3 samples
    for field in ("input_ids", "attention_mask", "position_ids", "labels", "truncated", "prompt_index"):
        assert torch.equal(getattr(shared, field), getattr(every, field)), field
    assert shared.completions == every.completions
    torch.testing.assert_close(shared.old_logps, every.old_logps, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["tiny", "qwen2"])
def test_old_logps_match_a_full_forward(kind):
    model = make_model(kind)
    b = generate(model, TOK, PROMPTS, SAMPLING, generator=torch.Generator().manual_seed(4))
    logps, _ = sequence_logps(
        model, b.input_ids, b.attention_mask, b.position_ids, b.labels, temperature=SAMPLING.temperature
    )
    on = b.labels != -100
    assert on.any()
    torch.testing.assert_close(b.old_logps[on], logps[on], atol=1e-4, rtol=0)


def test_greedy_with_distinct_prompts_prefills_each_once():
    model = make_model("tiny")
    sizes = prefill_batch_sizes(model)
    b = generate(model, TOK, ["ab", "abc", "b"], SamplingOptions(max_new_tokens=3, greedy=True))
    ref = generate(
        model,
        TOK,
        ["ab", "abc", "b"],
        SamplingOptions(max_new_tokens=3, greedy=True),
        decoding=Decoding.PER_ROW,
    )
    assert sizes == [3, 3]
    assert torch.equal(b.input_ids, ref.input_ids)


def test_distinct_rows_keep_first_seen_order():
    assert distinct_rows([[1, 2], [3], [1, 2], [], [3]]) == ([[1, 2], [3], []], [0, 1, 0, 2, 1])


def test_select_cache_rows_formats():
    k = torch.arange(2 * 3).reshape(2, 1, 3, 1).float()  # [B=2, heads, S, head_dim]
    index = torch.tensor([1, 1, 0])
    [(k2, v2)] = select_cache_rows(((k, k + 1),), index)
    assert torch.equal(k2, k[[1, 1, 0]]) and torch.equal(v2, k[[1, 1, 0]] + 1)
    transformers = pytest.importorskip("transformers")
    cache = transformers.DynamicCache()
    cache.update(k, k + 1, layer_idx=0)
    assert select_cache_rows(cache, index) is cache
    assert torch.equal(cache.layers[0].keys, k[[1, 1, 0]])
    with pytest.raises(TypeError, match="decoding=Decoding.PER_ROW"):
        select_cache_rows(object(), index)
