"""Policy models and tokenizers: a tiny CPU transformer, a character tokenizer, and Hugging Face loading."""

from twinkle_exp.models.hf import HFTokenizerAdapter, build_tiny_hf_model, load_hf_causal_lm
from twinkle_exp.models.tiny_lm import TinyCausalLM, TinyLMConfig, TinyLMOutput
from twinkle_exp.models.tokenizer import CharTokenizer, Tokenizer, encode_prompt

__all__ = [
    "CharTokenizer",
    "HFTokenizerAdapter",
    "TinyCausalLM",
    "TinyLMConfig",
    "TinyLMOutput",
    "Tokenizer",
    "build_tiny_hf_model",
    "encode_prompt",
    "load_hf_causal_lm",
]
