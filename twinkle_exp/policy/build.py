"""Policies: a model and its tokenizer, built from `conf/policy/`."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from twinkle_exp.models import CharTokenizer, TinyCausalLM, Tokenizer, load_hf_causal_lm, load_hf_model
from twinkle_exp.models.chat import with_chat_template
from twinkle_exp.models.gguf import resolve_source
from twinkle_exp.models.hf import enable_gradient_checkpointing
from twinkle_exp.models.lora import LoraSettings, apply_lora


@dataclass
class Policy:
    model: nn.Module
    tokenizer: Tokenizer
    # Loads a reference model of its own (`policy.reference_name_or_path`); None: the reference is the
    # policy's initial state (see twinkle_exp.policy.reference).
    load_reference: Callable[[], nn.Module] | None = None


def tiny_policy(
    d_model: int = 128, n_layers: int = 2, n_heads: int = 4, max_seq_len: int = 64, dropout: float = 0.0
) -> Policy:
    """The built-in character-level transformer, randomly initialised (seed torch first).

    These defaults are the built-in policy's (and `policy=tiny`'s, whose schema is derived from them).
    """
    tokenizer = CharTokenizer()
    model = TinyCausalLM(
        tokenizer.vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        max_seq_len=max_seq_len,
        dropout=dropout,
    )
    return Policy(model, tokenizer)


def hf_policy(
    name_or_path: str,
    dtype: str = "float32",
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
    gradient_checkpointing: bool = False,
    lora: LoraSettings | None = None,
    reference_name_or_path: str | None = None,
) -> Policy:
    """Any `transformers` causal LM with its tokenizer, from a local directory, a hub id or a GGUF file.

    Args:
        attn_implementation: "eager", "sdpa", "flash_attention_2", ...; None lets transformers choose.
        gradient_checkpointing: recompute activations in backward (less memory, more compute).
        lora: train LoRA adapters only; the reference is then the same model with its adapters disabled.
        reference_name_or_path: a separate reference model (same vocabulary); None: the policy's initial state.
    A `.gguf` file or a registered short name (`smollm2`) is de-quantized once and cached (`models/gguf.py`).
    """
    model, tokenizer = load_hf_causal_lm(
        resolve_source(name_or_path),
        dtype=dtype,
        trust_remote_code=trust_remote_code,
        attn_implementation=attn_implementation,
    )
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if lora is not None:
        model = apply_lora(model, _lora_settings(lora))
    load_reference = None
    if reference_name_or_path is not None:
        load_reference = functools.partial(
            load_hf_model,
            resolve_source(reference_name_or_path),
            dtype,
            trust_remote_code,
            attn_implementation,
        )
    return Policy(model, tokenizer, load_reference)


def _lora_settings(value: LoraSettings | Mapping[str, Any]) -> LoraSettings:
    # Hydra hands a nested group over as a DictConfig, not as the dataclass its schema names.
    if isinstance(value, LoraSettings):
        return value
    fields = {f.name for f in dataclasses.fields(LoraSettings)}
    unknown = sorted(set(value) - fields)
    if unknown:
        raise ValueError(f"policy.lora: unknown settings {unknown}; known: {sorted(fields)}")
    settings = dict(value)
    if "target_modules" in settings:
        settings["target_modules"] = list(settings["target_modules"])
    return LoraSettings(**settings)


def with_task_prompt_format(policy: Policy, task: Any) -> Policy:
    """`policy` with prompts wrapped in its tokenizer's chat template when the task asks for it.

    The task decides (`task.chat_template`, `task.system_prompt`) because the prompt format belongs to the
    data; the tokenizer does the wrapping because it holds the template.
    """
    if not getattr(task, "chat_template", False):
        return policy
    tokenizer = with_chat_template(policy.tokenizer, getattr(task, "system_prompt", None))
    return dataclasses.replace(policy, tokenizer=tokenizer)


# conf/policy/<name>.yaml options, by name; their schemas are derived from these signatures.
POLICIES = {"tiny": tiny_policy, "hf": hf_policy}
