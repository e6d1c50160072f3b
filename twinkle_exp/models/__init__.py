"""Policy models and tokenizers: a tiny CPU transformer, a character tokenizer, and Hugging Face loading."""

from twinkle_exp.models.hf import (
    HFTokenizerAdapter,
    build_tiny_hf_model,
    build_tiny_qwen2,
    enable_gradient_checkpointing,
    load_hf_causal_lm,
    load_hf_model,
)
from twinkle_exp.models.lora import LoraSettings
from twinkle_exp.models.tiny_lm import TinyCausalLM, TinyLMConfig, TinyLMOutput
from twinkle_exp.models.tokenizer import CharTokenizer, Tokenizer, encode_prompt

__all__ = [
    "CharTokenizer",
    "HFTokenizerAdapter",
    "LoraSettings",
    "TinyCausalLM",
    "TinyLMConfig",
    "TinyLMOutput",
    "Tokenizer",
    "build_tiny_hf_model",
    "build_tiny_qwen2",
    "enable_gradient_checkpointing",
    "encode_prompt",
    "load_hf_causal_lm",
    "load_hf_model",
]
