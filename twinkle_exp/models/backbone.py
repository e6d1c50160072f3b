"""Final hidden states and output head of a policy, so log-probs can skip the `[B, T, V]` logits.

`hidden_states_and_head` answers only when `logits == head(hidden)` exactly: the built-in `TinyCausalLM`,
and Hugging Face causal LMs of the architectures listed below (checked in their `forward`: `lm_head` of the
base model's `last_hidden_state`, nothing after it). Anything else returns None and the caller takes the
full logits: a head that is not a plain `nn.Linear` (LoRA on `lm_head`, peft's `modules_to_save` copy, a
quantised layer), a model that post-processes its logits (Gemma 2's soft-capping, Cohere's and Granite's
logit scales), or peft's prompt learning (prompt or prefix tuning edit the inputs in `PeftModel.forward`).

Under FSDP2 the model's own weights (embeddings, final norm, head) are gathered by the hooks of its
`forward` only, which this path does not call: `call_as_forward` runs it as a registered forward method.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from twinkle_exp.models.tiny_lm import TinyCausalLM

# transformers `model_type`s whose causal LM returns `lm_head(self.model(...).last_hidden_state)` unchanged.
PLAIN_HEAD_MODEL_TYPES = frozenset(
    {
        "deepseek_v3",
        "gemma",
        "glm",
        "llama",
        "mistral",
        "mixtral",
        "olmo",
        "olmo2",
        "phi",
        "phi3",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "smollm3",
        "starcoder2",
    }
)


def unwrap_peft(model: nn.Module) -> nn.Module:
    """A peft `PeftModel`'s underlying model: its LoRA layers are in place, so calling it still applies
    them (and a `disable_adapter()` context still disables them)."""
    get_base_model = getattr(model, "get_base_model", None)
    return get_base_model() if callable(get_base_model) else model


def has_sliding_window(model: nn.Module) -> bool:
    """Whether any attention layer of `model` (a transformers model, or a peft one around it) sees only a
    window of the past: its KV cache then keeps only that window, and cannot serve later passes."""
    config = getattr(unwrap_peft(model), "config", None)
    if any("sliding" in str(kind) for kind in getattr(config, "layer_types", None) or ()):
        return True
    return getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True)


def _prompt_learning(model: nn.Module) -> bool:
    # peft's prompt and prefix tuning change the inputs in PeftModel.forward, which the base model skips.
    config = getattr(model, "active_peft_config", None)
    return bool(getattr(config, "is_prompt_learning", False))


def output_head(model: nn.Module) -> nn.Linear | None:
    """The model's output projection if it is a plain `nn.Linear` whose output is the logits, else None."""
    if _prompt_learning(model):
        return None
    model = unwrap_peft(model)
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if not (isinstance(model, TinyCausalLM) or model_type in PLAIN_HEAD_MODEL_TYPES):
        return None
    head = model.get_output_embeddings()
    return head if type(head) is nn.Linear else None


def hidden_states_and_head(
    model: nn.Module,
    input_ids: torch.Tensor,  # [B, T]
    attention_mask: torch.Tensor,  # [B, T]
    position_ids: torch.Tensor,  # [B, T]
) -> tuple[torch.Tensor, nn.Linear] | None:  # final hidden states [B, T, H] and the head, or None
    """Run the model without its head; None when its logits are not `head(hidden)` (see the module doc)."""
    head = output_head(model)
    if head is None:
        return None
    model = unwrap_peft(model)
    if isinstance(model, TinyCausalLM):
        return model.hidden_states(input_ids, attention_mask, position_ids), head
    out = model.get_decoder()(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    )
    return out.last_hidden_state, head


_FORWARD_METHOD = "twinkle_call_as_forward"


def _call(self: nn.Module, fn: Callable[..., Any], *args: Any) -> Any:
    return fn(self, *args)


def call_as_forward(model: nn.Module, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(model, *args)`, run as a forward of `model`.

    A model sharded with FSDP2 (`fully_shard`) keeps its own weights sharded outside `forward`; registered as
    a forward method, `fn` runs between the pre- and post-forward hooks, which gather them and, in backward,
    reduce their gradients, exactly as for `model(...)`. Anything else just calls `fn`.
    """
    try:
        from torch.distributed.fsdp import FSDPModule, register_fsdp_forward_method
    except ImportError:  # a torch build without distributed: nothing can be sharded
        return fn(model, *args)
    if not isinstance(model, FSDPModule):
        return fn(model, *args)
    if _FORWARD_METHOD not in vars(model):  # once per model
        setattr(model, _FORWARD_METHOD, types.MethodType(_call, model))
        register_fsdp_forward_method(model, _FORWARD_METHOD)
    return getattr(model, _FORWARD_METHOD)(fn, *args)
