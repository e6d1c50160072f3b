"""Cascade attention samples what the model's own KV cache samples, keeping each prompt once per group."""

from __future__ import annotations

import pytest
import torch
from hf_helpers import tiny_mistral, tiny_qwen2, with_lora

from twinkle_exp.models import CharTokenizer, TinyCausalLM, build_tiny_hf_model
from twinkle_exp.sampling import cascade
from twinkle_exp.sampling.generate import Decoding, SamplingOptions, generate

transformers = pytest.importorskip("transformers")

TOK = CharTokenizer()
# Ragged prompts (left padding), one of them in two groups.
PROMPTS = ["12+34=", "7+8=", "12+34=", "abc", "hello world"]
GROUP = 4


def qwen2():  # grouped-query attention: 2 heads sharing 1 key/value head
    return tiny_qwen2(TOK.vocab_size)


def llama():
    return build_tiny_hf_model(TOK.vocab_size)


def lora_llama():
    pytest.importorskip("peft")
    return with_lora(llama(), ["q_proj", "v_proj"])  # adapters that change the keys and values


def sample(model, cascade_attention: bool | None, **kwargs):
    return generate(
        model,
        TOK,
        PROMPTS,
        SamplingOptions(max_new_tokens=16, group_size=GROUP, temperature=4.0),
        generator=torch.Generator().manual_seed(0),
        decoding={True: Decoding.CASCADE, False: Decoding.COPIED, None: None}[cascade_attention],
        **kwargs,
    )


@pytest.mark.parametrize("build", [qwen2, llama, lora_llama], ids=["qwen2", "llama", "lora"])
def test_cascade_samples_what_the_copied_cache_samples(build, monkeypatch):
    model = build().double().eval()
    assert cascade.supported(model)
    steps = []
    attend = cascade.CascadeCache.attend
    monkeypatch.setattr(cascade.CascadeCache, "attend", lambda self, *a: steps.append(1) or attend(self, *a))
    fast = sample(model, cascade_attention=True)
    assert steps, "the cascade path did not run"
    slow = sample(model, cascade_attention=False)
    # Precondition: some rows ended early, so finished rows decoded masked pads for a while.
    assert (fast.completion_lengths < 16).any() and (fast.completion_lengths == 16).any()
    assert torch.equal(fast.input_ids, slow.input_ids)
    torch.testing.assert_close(fast.old_logps, slow.old_logps, atol=1e-12, rtol=1e-12)
    assert unwrap_config(model)._attn_implementation == "sdpa"  # restored after decoding


def unwrap_config(model):
    from twinkle_exp.models.backbone import unwrap_peft

    return unwrap_peft(model).config


def test_float32_sampling_agrees_with_the_copied_cache():
    model = qwen2().eval()
    fast, slow = sample(model, cascade_attention=True), sample(model, cascade_attention=False)
    assert torch.equal(fast.input_ids, slow.input_ids)
    torch.testing.assert_close(fast.old_logps, slow.old_logps, atol=1e-5, rtol=1e-5)


def test_the_prompts_are_kept_once_per_group(monkeypatch):
    made = []  # as built: decoding drops the rows (and groups) that end
    original = cascade.CascadeCache.from_prefill

    def spy(*args, **kwargs):
        cache = original(*args, **kwargs)
        made.append((cache.prefix[0], cache.keys[0].shape[0]))
        return cache

    monkeypatch.setattr(cascade.CascadeCache, "from_prefill", spy)
    model = qwen2().eval()
    sample(model, cascade_attention=True)
    [((keys, values), completion_rows)] = made
    groups, width = len(PROMPTS), max(len(p) for p in PROMPTS) + 1  # + BOS
    assert keys.shape[:1] == values.shape[:1] == (groups,) and keys.shape[2] == width
    # The same prompt in groups 0 and 2: the same keys, from one prefill
    torch.testing.assert_close(keys[0], keys[2], atol=0, rtol=0)
    assert completion_rows == groups * GROUP  # the completions: one row each


def test_the_attention_setting_is_restored_when_decoding_fails(monkeypatch):
    model = qwen2().eval()

    def broken(self, *args):
        raise RuntimeError("boom")

    monkeypatch.setattr(cascade.CascadeCache, "attend", broken)
    with pytest.raises(RuntimeError, match="boom"):
        sample(model, cascade_attention=True)
    assert model.config._attn_implementation == "sdpa"


def test_which_models_decode_with_cascade_attention():
    assert not cascade.supported(
        TinyCausalLM(TOK.vocab_size, d_model=16, n_layers=1, n_heads=2, max_seq_len=32, dropout=0.0)
    )
    assert cascade.supported(qwen2())
    assert cascade.supported(build_tiny_hf_model(TOK.vocab_size, attn_implementation="eager"))
    # Mistral's cache keeps only its window, which cascade attention does not
    assert not cascade.supported(tiny_mistral(TOK.vocab_size, sliding_window=4))
    assert cascade.supported(tiny_mistral(TOK.vocab_size, sliding_window=None))
    gpt2 = transformers.GPT2Config(vocab_size=TOK.vocab_size, n_embd=16, n_layer=1, n_head=2)
    assert not cascade.supported(transformers.GPT2LMHeadModel(gpt2))  # not a checked model type


def _attention_inputs(dtype):
    """3 groups x 2 rows, 4 heads over 2 key/value heads, prompts of 5 columns with left padding, then 3
    completion tokens per row; and the same attention as one softmax over each row's full keys, float64."""
    gen = torch.Generator().manual_seed(0)
    groups, group, heads, kv, d, p, c = 3, 2, 4, 2, 8, 5, 3

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    prompt_k, prompt_v = randn(groups, kv, p, d), randn(groups, kv, p, d)
    prompt_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])
    own_k, own_v, q = (
        randn(groups * group, kv, c, d),
        randn(groups * group, kv, c, d),
        randn(groups * group, heads, 1, d),
    )
    rows = torch.arange(groups).repeat_interleave(group)
    keys = torch.cat([prompt_k[rows], own_k], 2).repeat_interleave(heads // kv, 1)
    values = torch.cat([prompt_v[rows], own_v], 2).repeat_interleave(heads // kv, 1)
    attend = torch.cat([prompt_mask[rows], torch.ones(groups * group, c, dtype=torch.long)], 1).bool()
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, keys, values, attn_mask=attend[:, None, None]
    )
    cache = cascade.CascadeCache([(prompt_k.to(dtype), prompt_v.to(dtype))], prompt_mask, group, capacity=c)
    for t in range(c - 1):  # the earlier completion tokens, as earlier steps appended them
        cache.keys[0][:, :, t], cache.values[0][:, :, t] = own_k[:, :, t].to(dtype), own_v[:, :, t].to(dtype)
    cache.length = c - 1
    step = (q.to(dtype), own_k[:, :, -1:].to(dtype), own_v[:, :, -1:].to(dtype))
    return cache, step, expected[:, :, 0], (q, keys, values, attend)


def test_attend_is_the_softmax_over_prompt_and_completion():
    cache, (q, k, v), expected, _ = _attention_inputs(torch.float64)
    torch.testing.assert_close(cache.attend(0, q, k, v, scale=8**-0.5), expected, atol=1e-12, rtol=1e-12)


def test_attend_after_rows_and_a_whole_group_ended():
    """Rows 0 and 4, 5 of 3 groups x 2 left: group 1 is dropped and group 0's one row padded to two."""
    cache, (q, k, v), expected, _ = _attention_inputs(torch.float64)
    kept = torch.tensor([0, 4, 5])
    cache.keep(kept)
    assert len(cache.prefix[0][0]) == 2 and cache.width == 2
    got = cache.attend(0, q[kept], k[kept], v[kept], scale=8**-0.5)
    torch.testing.assert_close(got, expected[kept], atol=1e-12, rtol=1e-12)


def test_bfloat16_attention_is_as_close_as_sdpa_in_bfloat16():
    cache, (q, k, v), expected, (q64, keys, values, attend) = _attention_inputs(torch.bfloat16)
    ours = cache.attend(0, q, k, v, scale=8**-0.5).double()
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q64.bfloat16(), keys.bfloat16(), values.bfloat16(), attn_mask=attend[:, None, None]
    )[:, :, 0].double()
    assert (ours - expected).abs().max() <= 1.5 * (sdpa - expected).abs().max()


def test_by_default_a_cpu_decodes_with_cascade_attention(monkeypatch):
    from twinkle_exp.config.schema import RolloutConfig

    assert RolloutConfig().cascade_attention is None  # the default: decide by device
    steps = []
    attend = cascade.CascadeCache.attend
    monkeypatch.setattr(cascade.CascadeCache, "attend", lambda self, *a: steps.append(1) or attend(self, *a))
    sample(qwen2().eval(), cascade_attention=None)
    assert steps
