"""LoRA adapters through peft: settings, wrapping a causal LM, and folding trained adapters into its base.

peft is an optional dependency (``twinkle_exp[hf]``), so it is imported inside the functions. The settings
are a plain dataclass, so the config schema of ``policy.lora`` can be derived from it without peft.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from twinkle_exp.models.lora_fused import fuse_lora_layers

# peft's own shorthand for every linear layer but the output head.
ALL_LINEAR = "all-linear"
# The hidden-state log-prob path reads the output head's weight directly, so the head (and the embedding
# it may be tied to) must stay a plain layer.
_REFUSED_TARGETS = ("lm_head", "embed_tokens", "wte", "tok_emb")


@dataclass
class LoraSettings:
    r: int = 16  # adapter rank
    alpha: float = 32.0  # scale = alpha / r
    # 0 by default: dropout would make the training pass disagree with the sampling pass (eval mode), so
    # on-policy ratios would no longer start at 1.
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: [ALL_LINEAR])
    # The adapted linear layers run as one autograd function (lora_fused.py): the same function as peft's
    # forward, up to rounding, with fewer passes over the layer's output. false: peft's own forward.
    fused: bool = True

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"policy.lora.r must be >= 1, got {self.r}")
        if not self.alpha > 0:
            raise ValueError(f"policy.lora.alpha must be > 0, got {self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"policy.lora.dropout must be in [0, 1), got {self.dropout}")
        targets = list(self.target_modules)
        if not targets:
            raise ValueError("policy.lora.target_modules is empty: name the layers to adapt, or all-linear")
        if ALL_LINEAR in targets and len(targets) > 1:
            raise ValueError(f"policy.lora.target_modules: {ALL_LINEAR!r} stands alone, got {targets}")
        refused = [t for t in targets if t in _REFUSED_TARGETS]
        if refused:
            raise ValueError(
                f"policy.lora.target_modules: {refused} cannot be adapted (the log-prob path reads the "
                f"output head and embeddings as plain weights); adapt the attention and MLP layers"
            )


def _import_peft() -> Any:
    try:
        import peft
    except ImportError as e:
        raise ImportError("LoRA needs peft: pip install twinkle_exp[hf]") from e
    return peft


def apply_lora(model: nn.Module, settings: LoraSettings) -> nn.Module:
    """`model` wrapped in a peft model with fresh adapters; only the adapters require grad.

    Fresh adapters are the identity (peft initialises B to zero), so the wrapped model computes exactly
    what `model` did.
    """
    peft = _import_peft()
    targets = settings.target_modules
    config = peft.LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=ALL_LINEAR if list(targets) == [ALL_LINEAR] else list(targets),
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        wrapped = peft.get_peft_model(model, config)
    except ValueError as e:  # peft names the module pattern that matched nothing
        raise ValueError(f"policy.lora.target_modules={list(targets)}: {e}") from e
    if settings.fused:
        fuse_lora_layers(wrapped)
    return wrapped


def is_lora(model: nn.Module) -> bool:
    return type(model).__module__.startswith("peft.") and hasattr(model, "disable_adapter")


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters an optimizer should get: with LoRA, the adapters only."""
    return [p for p in model.parameters() if p.requires_grad]


# Set on a model whose base weights `fold_adapters` changed: they are no longer the pretrained ones.
_FOLDED = "twinkle_base_folded"


def trainable_state_dict(model: nn.Module, state_dict: dict[str, torch.Tensor], prefix: str = "") -> dict:
    """`state_dict` (keys `prefix` + `model`'s names) cut to the trainable parameters when `model` is LoRA.

    A LoRA checkpoint then holds the adapters only, to be loaded onto the pretrained base. Unchanged
    without LoRA, and when adapters were folded into the base (the base alone would not restore it).
    """
    if not is_lora(model) or getattr(model, _FOLDED, False):
        return state_dict
    keep = {prefix + name for name, p in model.named_parameters() if p.requires_grad}
    return {k: v for k, v in state_dict.items() if k in keep}


@torch.no_grad()
def fold_adapters(model: nn.Module) -> bool:
    """Move what the adapters learned into the base weights and make the adapters the identity again.

    Afterwards the model computes the same function (up to rounding in the base weights' dtype), and the
    base model alone, with the adapters disabled, is that function. Returns whether anything was folded
    (False when every adapter is still the identity).
    """
    folded = False
    for module in model.modules():
        lora_b = getattr(module, "lora_B", None)
        if not isinstance(lora_b, nn.ModuleDict):
            continue
        for adapter, b in lora_b.items():
            if not b.weight.any():
                continue
            delta = module.get_delta_weight(adapter)  # [out, in], scale included
            base = module.get_base_layer().weight
            base += delta.to(base.dtype)
            b.weight.zero_()  # B = 0: the adapter adds nothing; A keeps its values (a valid LoRA init)
            folded = True
    if folded:
        setattr(model, _FOLDED, True)
    return folded
