"""TinyCausalLM, CharTokenizer and the Hugging Face adapter; tiny random models only, no network."""

import re

import pytest
import torch

from twinkle_exp.models import (
    CharTokenizer,
    HFTokenizerAdapter,
    TinyCausalLM,
    build_tiny_hf_model,
    encode_prompt,
    load_hf_causal_lm,
)

V = 99


@pytest.fixture
def model():
    torch.manual_seed(0)
    return TinyCausalLM(V, d_model=32, n_layers=2, n_heads=4, max_seq_len=32, dropout=0.0).eval()


def test_shapes_and_cache_format(model):
    ids = torch.randint(3, V, (3, 7))
    out = model(ids)
    assert out.logits.shape == (3, 7, V)
    assert out.past_key_values is None
    out = model(ids, use_cache=True)
    assert len(out.past_key_values) == 2
    k, v = out.past_key_values[0]
    assert k.shape == v.shape == (3, 4, 7, 8)
    assert model.num_parameters() == sum(p.numel() for p in model.parameters())
    assert model.config.vocab_size == V


def test_causal_masking(model):
    ids = torch.randint(3, V, (2, 10))
    changed = ids.clone()
    changed[:, 6] = (changed[:, 6] + 1 - 3) % (V - 3) + 3
    a, b = model(ids).logits, model(changed).logits
    torch.testing.assert_close(a[:, :6], b[:, :6])
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_left_padding_invariance(model):
    ids = torch.randint(3, V, (1, 6))
    padded = torch.cat([torch.zeros(1, 4, dtype=torch.long), ids], dim=1)
    mask = torch.cat([torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 6, dtype=torch.long)], dim=1)
    plain = model(ids).logits
    from_mask = model(padded, attention_mask=mask).logits  # positions derived from the mask
    assert torch.isfinite(from_mask).all()
    torch.testing.assert_close(from_mask[:, 4:], plain, atol=1e-5, rtol=1e-5)
    # Wrong positions (arange over the pads) must change the result: positions really come from the mask.
    shifted = model(padded, attention_mask=mask, position_ids=torch.arange(10)[None]).logits
    assert not torch.allclose(shifted[:, 4:], plain, atol=1e-3)


def test_padding_keys_are_masked(model):
    ids = torch.randint(3, V, (1, 8))
    mask = torch.ones(1, 8, dtype=torch.long)
    mask[0, 2] = 0
    other = ids.clone()
    other[0, 2] = (other[0, 2] + 5 - 3) % (V - 3) + 3
    pos = torch.arange(8)[None]
    a = model(ids, attention_mask=mask, position_ids=pos).logits
    b = model(other, attention_mask=mask, position_ids=pos).logits
    torch.testing.assert_close(a[:, 3:], b[:, 3:])


def test_kv_cache_matches_full_forward(model):
    ids = torch.randint(3, V, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, :3] = 0  # left padding in row 1
    full = model(ids, attention_mask=mask).logits
    out = model(ids[:, :5], attention_mask=mask[:, :5], use_cache=True)
    steps = [out.logits]
    past = out.past_key_values
    for t in range(5, 9):
        out = model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], past_key_values=past, use_cache=True)
        past = out.past_key_values
        steps.append(out.logits)
    assert past[0][0].shape[2] == 9
    torch.testing.assert_close(torch.cat(steps, dim=1)[1, 3:], full[1, 3:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat(steps, dim=1)[0], full[0], atol=1e-5, rtol=1e-5)


def test_max_seq_len_and_bad_args(model):
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.ones(1, 33, dtype=torch.long))
    past = model(torch.ones(1, 30, dtype=torch.long), use_cache=True).past_key_values
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.ones(1, 3, dtype=torch.long), past_key_values=past)
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.ones(1, 4, dtype=torch.long), attention_mask=torch.ones(1, 5))
    with pytest.raises(ValueError, match="divisible"):
        TinyCausalLM(V, d_model=30, n_layers=1, n_heads=4, max_seq_len=8, dropout=0.0)


def test_char_tokenizer_round_trip():
    tok = CharTokenizer()
    assert tok.vocab_size == len(tok) == 3 + 95 + 1
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    text = "What is 12 + 7?\nAnswer: {19} ~`|"
    ids = tok.encode(text)
    assert min(ids) >= 3 and max(ids) < tok.vocab_size
    assert tok.decode(ids) == text
    assert tok.decode([1, *ids, 2, 0, 0]) == text  # specials are skipped
    assert tok.decode(torch.tensor(ids)) == text
    assert tok.encode(" ") == [3] and tok.encode("\n") == [98]
    assert encode_prompt(tok, "ab") == [1, *tok.encode("ab")]


@pytest.mark.parametrize("bad", ["é", "\t", "日"])
def test_char_tokenizer_unknown_char(bad):
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        CharTokenizer().encode("ok" + bad)


def _hf_tokenizer(with_bos: bool = True, with_pad: bool = False):
    """A byte-level BPE trained in memory, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<eos>"] + (["<bos>"] if with_bos else []) + (["<pad>"] if with_pad else [])
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(["what is 1 + 2? answer 3", "hello world, hello there"] * 20, trainer)
    kwargs = {"eos_token": "<eos>"}
    if with_bos:
        kwargs["bos_token"] = "<bos>"
    if with_pad:
        kwargs["pad_token"] = "<pad>"
    return PreTrainedTokenizerFast(tokenizer_object=backend, **kwargs)


def test_hf_tokenizer_adapter():
    raw = _hf_tokenizer(with_bos=True)
    tok = HFTokenizerAdapter(raw)
    assert tok.eos_token_id == raw.convert_tokens_to_ids("<eos>")
    assert tok.bos_token_id == raw.convert_tokens_to_ids("<bos>")
    assert tok.pad_token_id == tok.eos_token_id  # no pad token: falls back to EOS
    assert tok.vocab_size == len(tok) == len(raw)
    text = "hello world, what is 1 + 2?"
    ids = tok.encode(text)
    assert tok.bos_token_id not in ids and tok.eos_token_id not in ids
    assert tok.decode([tok.bos_token_id, *ids, tok.eos_token_id]) == text
    assert encode_prompt(tok, text) == [tok.bos_token_id, *ids]

    no_bos = HFTokenizerAdapter(_hf_tokenizer(with_bos=False, with_pad=True))
    assert no_bos.bos_token_id is None
    assert no_bos.pad_token_id != no_bos.eos_token_id
    assert encode_prompt(no_bos, "hello") == no_bos.encode("hello")


def test_load_hf_causal_lm_from_local_dir(tmp_path):
    raw = _hf_tokenizer()
    model = build_tiny_hf_model(len(raw)).eval()
    model.save_pretrained(tmp_path)
    raw.save_pretrained(tmp_path)
    loaded, tok = load_hf_causal_lm(str(tmp_path))
    loaded.eval()
    assert isinstance(tok, HFTokenizerAdapter)
    assert next(loaded.parameters()).dtype == torch.float32
    ids = torch.tensor([encode_prompt(tok, "hello world")])
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
    loaded16, _ = load_hf_causal_lm(str(tmp_path), dtype="bfloat16")
    assert next(loaded16.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="dtype"):
        load_hf_causal_lm(str(tmp_path), dtype="float64")
