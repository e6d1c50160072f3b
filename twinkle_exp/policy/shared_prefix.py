"""Log-prob passes that run each distinct prompt once and share its KV cache with the group's samples.

A rollout holds `group_size` samples of every prompt, left-padded into the same prompt columns. The update's
forward and backward, the old-policy and the reference passes used to run all `group_size` copies of each
prompt through the model. Here the prompt columns of the distinct prompts go through the trunk once with a
KV cache; the cache (and the last prompt position's hidden state) is expanded to the rows, and the
completion columns run on top of it. Autograd sums the rows' gradients through the expansion, so the
log-probs and gradients are those of the full forward, up to the order of float sums
(`tests/test_shared_prefix_logps.py`). On a short-answer task the prompt is most of each row's tokens:
2-digit addition's 64 rows of 7 prompt and 4 completion tokens take 8 x 7 + 64 x 3 token positions instead of
64 x 11.

Which passes share: those of `sequence_logps` with a `SharedPrefix`, on a model with a plain output head
(`models/backbone.py`) whose layers do not checkpoint activations right now (transformers' checkpointed
layers drop the cache) and that has no sliding-window attention (its cache keeps only the window).
Anything else runs the full forward, with the same results.

Under FSDP2 every rank must gather each layer's weights as many times as the others, so nothing that
decides how often the model runs may depend on a rank's own rows: a sharded model shares every micro-batch
(also one whose rows all have prompts of their own, where sharing saves nothing) and always runs the
completion columns as a second pass (also when they are a single column, see `shared_hidden_states`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from twinkle_exp.logprobs import IGNORE_INDEX
from twinkle_exp.models.backbone import has_sliding_window, output_head, unwrap_peft
from twinkle_exp.models.kv_cache import cache_argument_name, distinct_rows, returned_cache, select_cache_rows
from twinkle_exp.models.tiny_lm import TinyCausalLM
from twinkle_exp.parallel.sharding import is_sharded


@dataclass(frozen=True)
class SharedPrefix:
    """Which rows of a micro-batch share their first `width` columns (none of which holds a label)."""

    width: int  # P, the shared columns
    first: torch.Tensor  # [D] long: a row of the micro-batch holding each distinct prefix
    source: torch.Tensor  # [B] long: the distinct prefix of each row of the micro-batch

    @property
    def saves(self) -> bool:
        """Whether some rows share a prefix (from the shapes alone: no device sync)."""
        return self.first.shape[0] < self.source.shape[0]


class PrefixIndex:
    """The distinct prompts of a batch, read once on the host; `for_rows` answers per micro-batch without a
    device sync."""

    def __init__(
        self,
        input_ids: torch.Tensor,  # [N, T]
        attention_mask: torch.Tensor,  # [N, T]
        position_ids: torch.Tensor,  # [N, T]
        labels: torch.Tensor,  # [N, T]
    ):
        labelled = (labels != IGNORE_INDEX).any(0).cpu()
        # The shared columns: those before the first label, where a row's tokens are its prompt's.
        self.width = int(labelled.int().argmax()) if bool(labelled.any()) else 0
        keys = torch.cat([t[:, : self.width].cpu() for t in (input_ids, attention_mask, position_ids)], 1)
        _, source = distinct_rows(keys.tolist())
        self.prefix_of_row = torch.tensor(source, dtype=torch.long)  # [N]

    @classmethod
    def of(cls, batch: Any) -> PrefixIndex:
        """The index of a `RolloutBatch`."""
        return cls(batch.input_ids, batch.attention_mask, batch.position_ids, batch.labels)

    def for_rows(self, rows: torch.Tensor | None, device: torch.device | str) -> SharedPrefix | None:
        """The sharing within the micro-batch `rows` (`[B]` long, any device; None: every row in order), or
        None when there is nothing to share (no shared columns, or no rows). Whether it saves anything is
        `SharedPrefix.saves`."""
        prefixes = self.prefix_of_row if rows is None else self.prefix_of_row[rows.cpu()]
        if self.width == 0 or len(prefixes) == 0:
            return None
        distinct, source = torch.unique(prefixes, return_inverse=True)
        positions = torch.arange(len(prefixes))
        first = torch.full((len(distinct),), len(prefixes)).scatter_reduce(0, source, positions, "amin")
        return SharedPrefix(self.width, first.to(device), source.to(device))


def can_share(model: nn.Module) -> bool:
    """Whether a pass through `model` can share prefixes now (see the module doc)."""
    if output_head(model) is None:
        return False
    base = unwrap_peft(model)
    if isinstance(base, TinyCausalLM):
        return True
    if has_sliding_window(base):
        return False
    return not any(getattr(m, "gradient_checkpointing", False) is True and m.training for m in base.modules())


def trunk(
    model: nn.Module,
    input_ids: torch.Tensor,  # [B, T]
    attention_mask: torch.Tensor,  # [B, Tpast + T]
    position_ids: torch.Tensor,  # [B, T]
    cache: Any,
) -> tuple[torch.Tensor, Any]:  # final hidden states [B, T, H], the extended cache
    """The model without its head, with a KV cache (the built-in model's tuples or a transformers `Cache`)."""
    base = unwrap_peft(model)
    if isinstance(base, TinyCausalLM):
        return base.trunk(input_ids, attention_mask, position_ids, cache)
    decoder = base.get_decoder()
    name = cache_argument_name(decoder)
    kwargs = {} if cache is None else {name: cache}
    out = decoder(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=True,
        **kwargs,
    )
    return out.last_hidden_state, returned_cache(out)


def shared_hidden_states(
    model: nn.Module,
    input_ids: torch.Tensor,  # [B, T]
    attention_mask: torch.Tensor,  # [B, T]
    position_ids: torch.Tensor,  # [B, T]
    prefix: SharedPrefix,
) -> torch.Tensor:  # [B, T - P, H]: the hidden states that predict columns P .. T-1
    """What `hidden[:, P - 1 : T - 1]` of a full forward holds, running each distinct prefix once."""
    p, first, source = prefix.width, prefix.first, prefix.source
    prompt_hidden, cache = trunk(
        model, input_ids[first, :p], attention_mask[first, :p], position_ids[first, :p], None
    )
    cache = select_cache_rows(cache, source)
    last_prompt = prompt_hidden[:, -1:].index_select(0, source)  # [B, 1, H] predicts column P
    if input_ids.shape[1] == p + 1:  # one completion column: the prompt predicts all there is
        if not is_sharded(model):
            return last_prompt
        # Another rank may have more columns, and so a second pass: this rank runs one too, over the
        # completion column, and keeps it in the graph at weight 0 so that its backward runs as well.
        unused, _ = trunk(model, input_ids[:, p:], attention_mask, position_ids[:, p:], cache)
        return last_prompt + 0.0 * unused
    hidden, _ = trunk(model, input_ids[:, p:-1], attention_mask[:, :-1], position_ids[:, p:-1], cache)
    return torch.cat([last_prompt, hidden], 1)


def should_share(model: nn.Module, prefix: SharedPrefix | None) -> bool:
    """Whether a pass through `model` over a micro-batch with `prefix` shares it (see the module doc)."""
    return prefix is not None and can_share(model) and (prefix.saves or is_sharded(model))
