"""Hugging Face models built locally: a character-level fast tokenizer, a random tiny Llama and Qwen2."""

from __future__ import annotations

from pathlib import Path

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
CHARS = [chr(c) for c in range(32, 127)]  # printable ASCII, space included


def char_level_hf_tokenizer():
    """A `PreTrainedTokenizerFast`: one token per printable ASCII character, plus pad/bos/eos/unk."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIALS + CHARS)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # every character alone
    backend.decoder = decoders.Fuse()  # join tokens without separators
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )


def tiny_qwen2(vocab_size: int):
    """A random float32 Qwen2 with a tied head: hidden 16, 2 layers, 2 heads sharing 1 key/value head."""
    from twinkle_exp.models import build_tiny_qwen2

    return build_tiny_qwen2(
        vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        max_position_embeddings=32,
    )


def small_qwen2(vocab_size: int):
    """A random float32 Qwen2 with a tied head: hidden 32, 2 layers, 4 heads sharing 2 key/value heads."""
    from twinkle_exp.models import build_tiny_qwen2

    return build_tiny_qwen2(
        vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=64,
    )


def save_tiny_hf_policy(directory: Path) -> Path:
    """Save the tokenizer and a matching random `LlamaForCausalLM` into `directory`; return it."""
    from twinkle_exp.models import build_tiny_hf_model

    tokenizer = char_level_hf_tokenizer()
    model = build_tiny_hf_model(len(tokenizer), max_position_embeddings=64)
    assert model.config.vocab_size == len(tokenizer) == len(SPECIALS) + len(CHARS)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return Path(directory)


def tiny_mistral(vocab_size: int, sliding_window: int | None):
    """A random Mistral of one layer (hidden 16, 2 heads over 1 key/value head), with or without a window."""
    import transformers

    config = transformers.MistralConfig(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        sliding_window=sliding_window,
    )
    return transformers.MistralForCausalLM(config)


def with_lora(model, target_modules: list[str]):
    """`model` with peft LoRA adapters (r 4, alpha 8) whose B matrices are random rather than zero, so that
    the adapters take part in the function from the start (peft initialises B to 0)."""
    import peft
    import torch

    model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=target_modules))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.1)
    return model


def save_tiny_llama_for_vllm(directory):
    """A tiny Llama and its character tokenizer saved to `directory` (vLLM loads a model from a folder): heads
    of size 32, the smallest vLLM's CPU attention takes. Returns `directory`."""
    from twinkle_exp.models import build_tiny_hf_model

    tokenizer = char_level_hf_tokenizer()
    model = build_tiny_hf_model(
        len(tokenizer), hidden_size=64, intermediate_size=128, num_heads=2, max_position_embeddings=128
    )
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
