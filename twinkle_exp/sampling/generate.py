"""Batched KV-cached sampling: G completions per prompt, with the log-probs the loss needs as old_logps.

Works with ``TinyCausalLM`` and Hugging Face causal LMs alike: both take ``attention_mask``,
``position_ids``, ``past_key_values``, ``use_cache`` and return ``.logits`` and ``.past_key_values``.
The cache object is only passed back to the model, never inspected, so tuple caches and transformers'
``Cache`` objects both work. transformers 5.2x renamed the argument and output field to ``cache`` (the
old name warns and is due to go), so ``forward_with_cache`` picks whichever name the model declares.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from twinkle_exp.logprobs import IGNORE_INDEX
from twinkle_exp.loss.batch import completion_mask
from twinkle_exp.models.backbone import unwrap_peft
from twinkle_exp.models.kv_cache import (
    cache_argument_name,
    distinct_rows,
    preallocate,
    returned_cache,
    select_cache_rows,
)
from twinkle_exp.models.tiny_lm import TinyCausalLM
from twinkle_exp.models.tokenizer import Tokenizer, encode_prompt
from twinkle_exp.sampling import cascade


@dataclass
class RolloutBatch:
    """`group_size` samples of each of N / group_size prompts; group g occupies rows g*G .. g*G+G-1."""

    input_ids: torch.Tensor  # [N, P + C] left-padded prompt then completion, right-padded with pad id
    attention_mask: torch.Tensor  # [N, P + C] 1 on real tokens
    position_ids: torch.Tensor  # [N, P + C] 0.. on real tokens, 0 on padding
    labels: torch.Tensor  # [N, P + C] completion ids incl. the ending EOS, -100 on prompt and padding
    old_logps: torch.Tensor  # [N, P + C] float32 log-prob of labels[:, t] under the sampler, 0 off labels
    completion_ids: list[list[int]]  # per sample, without the EOS
    completions: list[str]  # decoded completion text, without the final EOS; other specials kept as text
    truncated: torch.Tensor  # [N] bool, max_new_tokens reached without EOS
    prompt_index: torch.Tensor  # [N] source prompt of each row: row // group_size
    group_size: int  # G, samples per prompt
    # [N] float32: per row, the sum over its completion tokens of the tempered softmax's mass that top-k /
    # top-p removed before the draw (each token's total variation between the sampled and the scored
    # distribution); None when no filter was on.
    filtered_mass: torch.Tensor | None = None
    # How the rows were drawn, so every later pass scores them under the same softmax(logits / temperature)
    # without reading the rollout config again (the defaults: a plain draw, as SamplingOptions').
    temperature: float = 1.0
    top_k: int = 0  # 0: no top-k filter
    top_p: float = 1.0  # 1: no nucleus filter

    @property
    def completion_mask(self) -> torch.Tensor:
        """`[N, P + C]` bool, the completion tokens the loss scores (the loss's own definition)."""
        return completion_mask(self.labels)

    @property
    def completion_lengths(self) -> torch.Tensor:
        """`[N]` completion tokens per row, the ending EOS included."""
        return self.completion_mask.sum(-1)

    def per_row(self, per_prompt: list) -> list:
        """Expand one value per prompt (answers, prompts) to one per row, in the batch's group layout."""
        return [per_prompt[i] for i in self.prompt_index.tolist()]


def forward_with_cache(
    model: nn.Module,
    input_ids: torch.Tensor,  # [N, T]
    attention_mask: torch.Tensor,  # [N, Tpast + T]
    position_ids: torch.Tensor,  # [N, T]
    cache: Any,
    cache_name: str = "past_key_values",
    last_logits_only: bool = False,
) -> tuple[torch.Tensor, Any]:  # logits of the last position [N, V], the extended cache
    kwargs = {} if cache is None else {cache_name: cache}
    if last_logits_only:  # a prompt's [N, P, V] logits can be gigabytes, and only the last row is used
        kwargs["logits_to_keep"] = 1
    out = model(input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True, **kwargs)
    return out.logits[:, -1], returned_cache(out)


def filter_logits(
    logits: torch.Tensor,  # [N, V] float32, already divided by the temperature
    top_k: int,
    top_p: float,
) -> torch.Tensor:  # [N, V] with removed tokens at -inf
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # Drop a token when the tokens ranked above it already cover top_p; the first always stays.
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def draw(
    logits: torch.Tensor,  # [N, V] tempered logits (any float dtype), removed tokens at -inf
    generator: torch.Generator | None,
) -> torch.Tensor:  # [N] long, token i drawn with probability softmax(logits)[i]
    """One token per row from `softmax(logits)`: see `draw_from_probs`."""
    return draw_from_probs(torch.softmax(logits, dim=-1, dtype=torch.float32), generator)


def draw_from_probs(
    probs: torch.Tensor,  # [N, V] float32 probabilities up to a factor per row, removed tokens at 0
    generator: torch.Generator | None,
    block: int = 1024,
) -> torch.Tensor:  # [N] long, token i drawn with probability probs[i] / probs.sum()
    """One token per row by inverting the row's cumulative distribution, in float64, at a float64 uniform.

    Exact to 2**-53 of a row's mass at any vocabulary size. The Gumbel-max draw this replaces took its
    uniforms in float32, on a 2**-24 grid: its noise stopped at about 16.6, so a token 17 nats below the
    head (p ~ 4e-8) could almost never win, and a 151,936-token tail holding 0.3% of the mass was drawn
    0.05% of the time. One uniform per row instead of one per token, and a search in two stages (which
    `block` of tokens, then which token in it) instead of a float64 cumulative sum over the whole row,
    make it faster than the float32 draw was; it never syncs a GPU. A token of probability 0 (removed, or
    underflowed) is never drawn: each search returns the first entry whose cumulative mass exceeds the
    target, which has mass of its own. A row without finite mass (all -inf or NaN logits) gets some
    in-range token; its log-prob is not finite and the non-finite guard skips the step.
    """
    n, v = probs.shape
    block = min(block, v)
    full = v - v % block
    masses = [probs[:, :full].unflatten(-1, (-1, block)).sum(-1, dtype=torch.float64)]
    if full < v:
        masses.append(probs[:, full:].sum(-1, keepdim=True, dtype=torch.float64))
    block_cdf = torch.cat(masses, dim=1).cumsum(-1)  # [N, blocks]
    u = torch.rand((n, 1), generator=generator, device=probs.device, dtype=torch.float64)
    target = u * block_cdf[:, -1:]
    chosen = _first_above(block_cdf, target)  # [N, 1]
    before = block_cdf.gather(-1, (chosen - 1).clamp(min=0)).masked_fill(chosen == 0, 0.0)
    cols = chosen * block + torch.arange(block, device=probs.device)  # [N, block]
    inside = probs.gather(-1, cols.clamp(max=v - 1)).masked_fill(cols >= v, 0.0)
    within = _first_above(inside.cumsum(-1, dtype=torch.float64), target - before)
    return (chosen * block + within).squeeze(-1).clamp_(max=v - 1)  # a row without mass: the short last block


def _first_above(
    cdf: torch.Tensor,  # [N, K] float64 non-decreasing
    target: torch.Tensor,  # [N, 1] float64 >= 0
) -> torch.Tensor:  # [N, 1] long, the first k with cdf[k] > target
    """Rounding can leave the target at or above the last entry (u * total, or the sums in another
    order): it is held strictly below it, so the answer is always in range and has mass."""
    target = torch.minimum(target, cdf[:, -1:].nextafter(torch.zeros_like(target)))
    return torch.searchsorted(cdf, target, right=True).clamp_(max=cdf.shape[-1] - 1)


def filtering(top_k: int, top_p: float, vocab_size: int) -> bool:
    """Whether top-k / top-p remove anything from a `vocab_size`-token softmax (they may, per row)."""
    return 0 < top_k < vocab_size or top_p < 1.0


def tempered(
    logits: torch.Tensor,  # [N, V] the model's logits, any float dtype
    temperature: float,
) -> torch.Tensor:  # [N, V] float32 logits / temperature
    """Below temperature 1 the row's maximum is taken off first (softmax does not change), so a tiny
    temperature sends the other tokens to -inf instead of overflowing the head to inf (NaN everywhere)."""
    scaled = logits.float()
    if temperature < 1.0:
        scaled = scaled - scaled.amax(-1, keepdim=True)
    return scaled / temperature


def _validate(group_size: int, max_new_tokens: int, temperature: float, top_k: int, top_p: float) -> None:
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not 0 < temperature < float("inf"):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def left_pad(
    sequences: list[list[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:  # ids [N, P], mask [N, P]
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        if s:
            ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s) :] = 1
    return ids.to(device), mask.to(device)


# A shorter common head saves less than its extra forward call costs; it also keeps the built-in tasks' short
# heads ("rev:") on the one-call prefill that their published figures were measured with.
MIN_SHARED_COLUMNS = 16


def shared_columns(
    ids: torch.Tensor,  # [D, P] left-padded prompts
    mask: torch.Tensor,  # [D, P]
) -> int:
    """How many leading columns hold the same real tokens in every row, short of the last column (whose
    logits each row needs); 0 for a single row, where left padding starts any row, or below
    `MIN_SHARED_COLUMNS`."""
    if ids.shape[0] < 2:
        return 0
    same = (ids == ids[:1]).all(0) & mask.bool().all(0)  # [P]
    shared = int(same[:-1].long().cumprod(0).sum())
    return shared if shared >= MIN_SHARED_COLUMNS else 0


def _prefill_distinct(
    model: nn.Module, rows: list[list[int]], pad_id: int, device: torch.device, cache_name: str
) -> tuple[torch.Tensor, Any, torch.Tensor | None]:
    """Each distinct prompt of `rows` through the model once: the last position's logits `[D, V]`, the cache
    of the D distinct prompts, and the distinct prompt of each row `[N]` (None when every row is its own).
    The columns all distinct prompts start with run once (`shared_columns`)."""
    distinct, source = distinct_rows(rows)
    # left_pad pads to the longest prompt, which is the same for the distinct ones: the cache lines up
    # with the rows' [N, P] mask.
    ids, mask = left_pad(distinct, pad_id, device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    last_only = "logits_to_keep" in inspect.signature(unwrap_peft(model).forward).parameters
    shared = shared_columns(ids, mask)
    past = None
    if shared > 0:
        # The columns every prompt starts with (a chat template's system turn is half of a short prompt's
        # tokens) run once; their cache is copied to the prompts, which run on from there.
        head = (t[:1, :shared] for t in (ids, mask, positions))
        _, past = forward_with_cache(model, *head, None, cache_name, last_only)
        past = select_cache_rows(past, torch.zeros(len(distinct), dtype=torch.long, device=device))
    tail = (ids[:, shared:], mask, positions[:, shared:])
    logits, cache = forward_with_cache(model, *tail, past, cache_name, last_only)
    if source == list(range(len(distinct))):  # every row its own prompt (greedy validation): nothing to copy
        return logits, cache, None
    return logits, cache, torch.tensor(source, device=device)


# Dropping rows copies the decoder's keys and values: for SmolLM2's 64 rows on a CPU core ~30 ms for the whole
# KV cache (`COPIED`), ~15 ms for cascade's completions, where a decoding step costs ~2.5 ms per row. A drop
# at every row that ends pays a copy for a row or two; waiting for an eighth of the batch makes a handful
# (4 in a preset rollout of the untrained model), each for several rows. Every end, an eighth and a quarter
# timed alike within a shared machine's noise.
DROP_AT = 1 / 8


def compacts(model: nn.Module) -> bool:
    """Whether `generate` drops ended rows by default: for every model but the built-in `TinyCausalLM`, whose
    decoding step costs so little per row that dropping rows measured no faster, while a batch of another
    size rounds its logits differently and so moves a seed's trajectory (docs/experiment.md, "Sampling")."""
    return not isinstance(unwrap_peft(model), TinyCausalLM)


class _CachedDecoder:
    """Decoding steps through the model's own KV cache, which holds a copy of the prompt for every row."""

    def __init__(self, model: nn.Module, cache: Any, prompt_mask: torch.Tensor, cache_name: str):
        self.model, self.cache, self.mask, self.cache_name = model, cache, prompt_mask, cache_name

    def step(self, tok: torch.Tensor, real: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """tok, real, pos `[N]`: this step's tokens, whether they count, their positions -> logits `[N, V]`."""
        self.mask = torch.cat([self.mask, real.long()[:, None]], dim=1)
        logits, self.cache = forward_with_cache(
            self.model, tok[:, None], self.mask, pos[:, None], self.cache, self.cache_name
        )
        return logits

    def keep(self, index: torch.Tensor) -> None:
        """Keep only the rows `index` `[N']` long, increasing, of the current N (the others have ended)."""
        self.cache = select_cache_rows(self.cache, index)
        self.mask = self.mask.index_select(0, index)


class _CascadeDecoder:
    """Decoding steps with cascade attention: each group's prompt is read once per step (`cascade.py`)."""

    def __init__(self, model: nn.Module, cache: cascade.CascadeCache):
        self.model, self.cache = model, cache

    def step(self, tok: torch.Tensor, real: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """As `_CachedDecoder.step`; `real` needs no mask here (see `cascade.CascadeCache`)."""
        out = self.model(tok[:, None], position_ids=pos[:, None], use_cache=False, cascade=self.cache)
        self.cache.length += 1
        return out.logits[:, -1]

    def keep(self, index: torch.Tensor) -> None:
        """As `_CachedDecoder.keep`."""
        self.cache.keep(index)


class Decoding(enum.Enum):
    """How the prompts' keys and values reach the decoding steps; every way samples the same tokens.

    `CASCADE` keeps each group's prompt once and attends to it as a group (`cascade.py`); `COPIED` prefills
    each distinct prompt once and copies its KV cache to the group's rows (`kv_cache`); `PER_ROW` prefills
    every row, the plain way, kept as the reference the other two are measured and tested against.
    """

    CASCADE = "cascade"
    COPIED = "copied"
    PER_ROW = "per_row"

    @staticmethod
    def auto(model: nn.Module, device: torch.device, cascade_attention: bool | None = None) -> Decoding:
        """`rollout.cascade_attention`: True / False, or None for a CPU only (where it was measured faster)."""
        wanted = device.type == "cpu" if cascade_attention is None else cascade_attention
        return Decoding.CASCADE if wanted and cascade.supported(model) else Decoding.COPIED


@dataclass(frozen=True)
class SamplingOptions:
    """What `generate` draws: `group_size` completions per prompt of at most `max_new_tokens` tokens, from
    the tempered softmax filtered by `top_k` / `top_p` (0 / 1: off), or the greedy decode."""

    max_new_tokens: int
    group_size: int = 1
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    greedy: bool = False

    def __post_init__(self) -> None:
        _validate(self.group_size, self.max_new_tokens, self.temperature, self.top_k, self.top_p)


def _start_decoding(
    model: nn.Module,
    encoded: list[list[int]],  # [N] prompts, group_size consecutive rows each
    prompt_ids: torch.Tensor,  # [N, P]
    prompt_mask: torch.Tensor,  # [N, P]
    prompt_pos: torch.Tensor,  # [N, P]
    group_size: int,
    max_new_tokens: int,
    pad_id: int,
    how: Decoding,
) -> tuple[torch.Tensor, _CachedDecoder | _CascadeDecoder]:  # the first token's logits [N, V], the decoder
    device, cache_name = prompt_ids.device, cache_argument_name(model)
    if how is Decoding.PER_ROW:
        logits, past = forward_with_cache(model, prompt_ids, prompt_mask, prompt_pos, None, cache_name)
        return logits, _CachedDecoder(
            model, preallocate(past, prompt_ids.shape[1] + max_new_tokens), prompt_mask, cache_name
        )
    logits, past, source = _prefill_distinct(model, encoded, pad_id, device, cache_name)
    if source is not None:
        logits = logits.index_select(0, source)
    if how is Decoding.CASCADE:
        first_of_group = torch.arange(0, len(encoded), group_size, device=device)
        group_prompt = first_of_group if source is None else source[first_of_group]
        state = cascade.CascadeCache.from_prefill(
            past, group_prompt, prompt_mask[first_of_group], group_size, max_new_tokens
        )
        return logits, _CascadeDecoder(model, state)
    if source is not None:
        past = select_cache_rows(past, source)
    past = preallocate(past, prompt_ids.shape[1] + max_new_tokens)
    return logits, _CachedDecoder(model, past, prompt_mask, cache_name)


def _drop_finished(
    decoder: _CachedDecoder | _CascadeDecoder,
    rows: torch.Tensor,  # [B] long, increasing: the rows of the batch the decoder holds
    alive: torch.Tensor,  # [N] bool, the rows still decoding
) -> torch.Tensor:  # [B'] long, the rows it holds now
    """Drop the rows that have ended from the decoder once they are `DROP_AT` of its batch: each step would
    only decode a masked pad for them, at the cost of a live row."""
    keep = alive.index_select(0, rows).nonzero().squeeze(-1)  # [B'] places in the decoder's batch
    if len(rows) - len(keep) < max(1, DROP_AT * len(rows)):
        return rows
    decoder.keep(keep)
    return rows.index_select(0, keep)


def _on_all_rows(
    logits: torch.Tensor,  # [B, V] of `rows`
    rows: torch.Tensor,  # [B] long, increasing
    n: int,
) -> torch.Tensor:  # [N, V], zeros on the rows not in `rows`
    """Every row still takes its uniform in the draw, so that each live row's draw is the one it would
    have had without dropping rows; an ended row's token is discarded, and zeros are a harmless softmax."""
    if len(rows) == n:
        return logits
    return logits.new_zeros(n, logits.shape[-1]).index_copy_(0, rows, logits)


@torch.no_grad()
def generate(
    model: nn.Module,
    tokenizer: Tokenizer,
    prompts: list[str],
    options: SamplingOptions,
    *,
    generator: torch.Generator | None = None,
    decoding: Decoding | None = None,
    compact: bool | None = None,
) -> RolloutBatch:
    """Sample `options.group_size` completions for every prompt (or decode greedily) with a KV cache.

    old_logps are taken from the tempered, unfiltered distribution: that is the policy the loss
    re-evaluates, and top-k/top-p only decide which token is drawn, so the tokens come from another
    distribution than the one scored; `filtered_mass` measures the gap
    (docs/experiment.md, "Top-k and top-p"). Greedy decoding records temperature-1 log-probs. The
    model's train/eval mode is left as the caller set it. `generator` must live on the model's device (the
    draws are made there). `decoding` (default `Decoding.auto`) changes the speed, never the tokens up to float
    rounding; so does `compact`, which runs each decoding step on the rows still decoding only (False: on all
    rows, finished ones decoding a masked pad, as the reference the tests compare with; None:
    `compacts(model)`).
    """
    group_size, max_new_tokens, greedy = options.group_size, options.max_new_tokens, options.greedy
    top_k, top_p = options.top_k, options.top_p
    if not prompts:
        raise ValueError("prompts must not be empty")
    device = next(model.parameters()).device
    encoded = [encode_prompt(tokenizer, p) for p in prompts]
    if any(len(e) == 0 for e in encoded):
        raise ValueError("a prompt encodes to no tokens and the tokenizer has no BOS to start from")
    encoded = [e for e in encoded for _ in range(group_size)]  # one per row
    prompt_index = torch.arange(len(prompts), device=device).repeat_interleave(group_size)
    pad_id, eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    temp = 1.0 if greedy else options.temperature

    prompt_ids, prompt_mask = left_pad(encoded, pad_id, device)
    n = prompt_ids.shape[0]
    prompt_pos = (prompt_mask.cumsum(-1) - 1).clamp(min=0)  # 0 on the left padding too
    next_pos = prompt_mask.sum(-1)  # [N] position of the next token
    how = Decoding.auto(model, device) if decoding is None else decoding
    compact = compacts(model) if compact is None else compact
    if how is Decoding.CASCADE and not cascade.supported(model):
        how = Decoding.COPIED
    logits, decoder = _start_decoding(
        model, encoded, prompt_ids, prompt_mask, prompt_pos, group_size, max_new_tokens, pad_id, how
    )

    alive = torch.ones(n, dtype=torch.bool, device=device)
    rows = torch.arange(n, device=device)  # [B] the rows the decoder holds
    tokens, logps, valid, removed_mass = [], [], [], []
    filters = not greedy and filtering(top_k, top_p, logits.shape[-1])
    with cascade.decoding(model) if how is Decoding.CASCADE else contextlib.nullcontext():
        for step in range(max_new_tokens):
            scaled = tempered(logits, temp)
            logp_all = torch.log_softmax(scaled, dim=-1)  # [N, V]
            if greedy:
                tok = scaled.argmax(-1)
            elif not filters:
                tok = draw_from_probs(logp_all.exp(), generator)
            else:
                probs = logp_all.exp()
                removed = torch.isneginf(filter_logits(scaled, top_k, top_p))
                removed_mass.append(torch.where(alive, (probs * removed).sum(-1), 0.0))
                tok = draw_from_probs(probs.masked_fill_(removed, 0.0), generator)
            tok_logp = logp_all.gather(-1, tok[:, None]).squeeze(-1)
            tok = torch.where(alive, tok, torch.full_like(tok, pad_id))
            tokens.append(tok)
            logps.append(torch.where(alive, tok_logp, torch.zeros_like(tok_logp)))
            valid.append(alive)
            if eos_id is not None:
                alive = alive & (tok != eos_id)
            if step == max_new_tokens - 1 or not bool(alive.any()):
                break
            # Finished rows decode a masked pad until they leave the decoder's batch (never with compact=False).
            was_real = valid[-1]
            pos = torch.where(was_real, next_pos, torch.zeros_like(next_pos))
            next_pos = next_pos + was_real.long()
            if compact:
                rows = _drop_finished(decoder, rows, alive)
            logits = _on_all_rows(decoder.step(tok[rows], was_real[rows], pos[rows]), rows, n)

    comp_ids = torch.stack(tokens, dim=1)  # [N, C]
    comp_valid = torch.stack(valid, dim=1)  # [N, C] bool
    comp_logps = torch.stack(logps, dim=1)  # [N, C] float32
    c = comp_ids.shape[1]
    comp_pos = prompt_mask.sum(-1, keepdim=True) + torch.arange(c, device=device)
    zeros_p = torch.zeros_like(prompt_ids)
    input_ids = torch.cat([prompt_ids, comp_ids], dim=1)
    labels = torch.cat(
        [torch.full_like(prompt_ids, IGNORE_INDEX), comp_ids.masked_fill(~comp_valid, IGNORE_INDEX)], 1
    )
    completion_lengths = comp_valid.sum(-1)

    completion_ids = []
    for row, length in zip(comp_ids.tolist(), completion_lengths.tolist(), strict=True):
        row = row[:length]
        if row and eos_id is not None and row[-1] == eos_id:
            row = row[:-1]
        completion_ids.append(row)
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=torch.cat([prompt_mask, comp_valid.long()], dim=1),
        position_ids=torch.cat([prompt_pos, comp_pos * comp_valid], dim=1),
        labels=labels,
        old_logps=torch.cat([zeros_p.float(), comp_logps], dim=1),
        completion_ids=completion_ids,
        # Specials inside a completion stay in its text, so a reward sees what was sampled ("c<pad>b" != "cb").
        completions=[tokenizer.decode(ids, skip_special_tokens=False) for ids in completion_ids],
        truncated=alive.clone(),
        prompt_index=prompt_index,
        group_size=group_size,
        filtered_mass=torch.stack(removed_mass, dim=1).sum(-1) if filters else None,
        temperature=temp,
        top_k=0 if greedy else top_k,
        top_p=1.0 if greedy else top_p,
    )
