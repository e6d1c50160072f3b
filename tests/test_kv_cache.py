"""Decoding appends to a preallocated KV cache in place, and samples exactly what the growing cache did."""

from __future__ import annotations

import pytest
import torch
from hf_helpers import small_qwen2

from twinkle_exp.models import CharTokenizer, build_tiny_hf_model
from twinkle_exp.models.kv_cache import preallocate
from twinkle_exp.sampling import generate
from twinkle_exp.sampling.generate import Decoding, SamplingOptions

TOK = CharTokenizer()
PROMPTS = ["1+2=", "hello world", "1+2=", "abc"]


def qwen2():
    return small_qwen2(TOK.vocab_size).eval()


def llama():
    return build_tiny_hf_model(TOK.vocab_size).eval()


def sample(model, **kwargs):
    """Sampling through the model's own KV cache (cascade attention would keep its own, `test_cascade.py`)."""
    gen = torch.Generator().manual_seed(0)
    return generate.generate(
        model,
        TOK,
        PROMPTS,
        SamplingOptions(max_new_tokens=8, group_size=3, temperature=1.5),
        generator=gen,
        **({"decoding": Decoding.COPIED} | kwargs),
    )


@pytest.mark.parametrize("build", [qwen2, llama], ids=["qwen2", "llama"])
@pytest.mark.parametrize("decoding", [Decoding.COPIED, Decoding.PER_ROW])
def test_sampling_is_unchanged_by_the_preallocated_cache(build, decoding, monkeypatch):
    pytest.importorskip("transformers")
    model = build()
    layer_kinds = []

    def spy(cache, capacity):
        cache = preallocate(cache, capacity)
        layer_kinds.append({type(layer).__name__ for layer in cache.layers})
        return cache

    monkeypatch.setattr(generate, "preallocate", spy)
    fast = sample(model, decoding=decoding)
    assert layer_kinds == [{"InPlaceLayer"}]
    monkeypatch.setattr(generate, "preallocate", lambda cache, capacity: cache)  # torch.cat every token
    slow = sample(model, decoding=decoding)
    assert torch.equal(fast.input_ids, slow.input_ids)
    torch.testing.assert_close(fast.old_logps, slow.old_logps, atol=1e-6, rtol=1e-6)


def test_layers_append_in_place_and_fall_back_to_cat():
    transformers = pytest.importorskip("transformers")
    model = qwen2()
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    out = model(ids, use_cache=True)
    cache = generate.returned_cache(out)
    before = [layer.keys.clone() for layer in cache.layers]
    cache = preallocate(cache, capacity=5)
    layer = cache.layers[0]
    assert type(layer).__base__ is transformers.cache_utils.DynamicLayer
    assert torch.equal(layer.keys, before[0])
    buffer = layer.key_buffer.data_ptr()
    new = torch.randn(2, layer.keys.shape[1], 2, layer.keys.shape[3])
    keys, _ = layer.update(new, new.clone())
    assert keys.data_ptr() == buffer and keys.shape[-2] == 5  # written into the buffer: no copy
    torch.testing.assert_close(keys, torch.cat([before[0], new], -2))
    more = torch.randn(2, layer.keys.shape[1], 1, layer.keys.shape[3])
    keys, _ = layer.update(more, more.clone())  # past the capacity: torch.cat, same values
    torch.testing.assert_close(keys, torch.cat([before[0], new, more], -2))
    assert keys.data_ptr() != buffer


def test_selected_rows_keep_appending_in_place():
    pytest.importorskip("transformers")
    model = qwen2()
    out = model(torch.tensor([[5, 6, 7], [8, 9, 10], [11, 12, 13]]), use_cache=True)
    cache = preallocate(generate.returned_cache(out), capacity=5)
    layer = cache.layers[0]
    before = layer.keys.clone()
    cache.batch_select_indices(torch.tensor([0, 2]))  # as decoding drops a row that has ended
    assert layer.keys.data_ptr() == layer.key_buffer.data_ptr() and layer.key_buffer.shape[2] == 5
    new = torch.randn(2, layer.keys.shape[1], 1, layer.keys.shape[3])
    keys, values = layer.update(new, new.clone())
    assert keys.data_ptr() == layer.key_buffer.data_ptr()
    torch.testing.assert_close(keys, torch.cat([before[[0, 2]], new], -2))
    assert values.shape == keys.shape


def test_a_layer_whose_keys_were_replaced_goes_back_to_cat():
    transformers = pytest.importorskip("transformers")
    model = qwen2()
    out = model(torch.tensor([[5, 6, 7], [8, 9, 10]]), use_cache=True)
    cache = preallocate(generate.returned_cache(out), capacity=16)
    for layer in cache.layers:  # DynamicLayer's own selection: new tensors, not the buffers
        transformers.cache_utils.DynamicLayer.batch_select_indices(layer, torch.tensor([1, 1, 0]))
    layer = cache.layers[0]
    selected = layer.keys.clone()
    new = torch.randn(3, layer.keys.shape[1], 1, layer.keys.shape[3])
    keys, _ = layer.update(new, new.clone())
    torch.testing.assert_close(keys, torch.cat([selected, new], -2))


def test_tuple_caches_are_left_alone():
    cache = ((torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4)),)
    assert preallocate(cache, capacity=8) is cache
