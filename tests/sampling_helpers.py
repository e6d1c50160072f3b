"""A model wrapper for sampling tests: where a completion ends is known in advance."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

from twinkle_exp.models import CharTokenizer
from twinkle_exp.models.kv_cache import cache_argument_name, returned_cache


class EosAtPosition(nn.Module):
    """Forces EOS as the token at absolute position ``stop`` and nowhere before, so the stopping step is
    known in advance; the EOS logit is a function of position_ids, so a full forward pass agrees."""

    def __init__(self, inner: nn.Module, stop: int, eos_id: int = CharTokenizer().eos_token_id):
        super().__init__()
        self.inner, self.stop, self.eos_id = inner, stop, eos_id

    def forward(
        self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False
    ):
        kwargs = {} if past_key_values is None else {cache_argument_name(self.inner): past_key_values}
        out = self.inner(
            input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=use_cache, **kwargs
        )
        cache = returned_cache(out)
        # logits at position p predict the token at p + 1
        eos_logit = torch.where(position_ids >= self.stop - 1, 100.0, -100.0)  # [B, T]
        logits = out.logits.clone()
        logits[..., self.eos_id] = eos_logit
        return SimpleNamespace(logits=logits, past_key_values=cache)
