"""`rollout.engine=vllm`: a colocated vLLM engine in the trainer's process samples the rollouts.

The engine holds its own copy of the policy's weights. `VllmEngine.sync` pushes the policy's current weights
into it (LoRA adapters merged into a plain copy first, `models/merged_copy.py`) whenever the caller's weights
version differs from the one it holds, so nothing is pushed when no optimizer step ran, a resumed run pushes
its restored weights before its first rollout, and `rollout.staleness=k` pushes the lagged weights.

`generate` returns the built-in sampler's `RolloutBatch`: prompts encoded by the project's tokenizer (chat
template included) and handed to vLLM as token ids, so both samplers see the same tokens; temperature, top-k,
top-p and max new tokens map one to one; the old log-probs are the engine's own per token (`logprobs=0`,
`logprobs_mode="processed_logprobs"`: after the temperature, and after top-k / top-p, whose kept tokens are
renormalised: with a filter on, the engine's log-prob of a token is the trainer's tempered one minus the log
of the kept mass, where the built-in sampler records the unfiltered one; docs/real-models.md).

Seeds: vLLM's per-request seeds crash its CPU sampler once a prompt's prefill is split across steps, so each
rollout reseeds torch's global generator (the engine's draws come from it in-process) from the caller's
generator, inside `torch.random.fork_rng`: the draws are a function of the run's seed and rank and survive a
resume, and the trainer's own global generator is left as it was.

vLLM is imported only here, and only when the first engine starts (14 s).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from twinkle_exp.logprobs import IGNORE_INDEX
from twinkle_exp.models.backbone import unwrap_peft
from twinkle_exp.models.merged_copy import MergedCopy, can_merge
from twinkle_exp.models.tokenizer import Tokenizer, encode_prompt
from twinkle_exp.sampling.generate import RolloutBatch, SamplingOptions, left_pad

SEED_RANGE = 2**31 - 1


@dataclass(frozen=True)
class EngineSettings:
    """`rollout.vllm` (config.schema.VllmConfig) as the engine reads it."""

    dtype: str = "float32"
    kv_cache_gib: int = 1
    gpu_memory_utilization: float = 0.3
    max_model_len: int = 1024
    prefix_caching: bool = False
    enforce_eager: bool = True

    @classmethod
    def of(cls, config: Any) -> EngineSettings:
        return cls(**{name: getattr(config, name) for name in cls.__dataclass_fields__})


def model_source(model: nn.Module) -> str:
    """The directory (or hub id) `model` was loaded from: the engine loads its architecture and first weights
    from there (a GGUF policy's converted directory), then takes every weight the trainer pushes."""
    source = getattr(getattr(unwrap_peft(model), "config", None), "_name_or_path", "")
    if not source:
        raise ValueError(
            "rollout.engine=vllm: the policy was not loaded from a transformers directory or hub id, so the "
            "engine has nothing to start from; use policy=hf"
        )
    return source


@contextmanager
def _engine_environment(settings: EngineSettings) -> Iterator[None]:
    """vLLM's environment while it starts: the KV cache's size on a CPU (unset, vLLM takes half the
    machine's memory) and the engine core in this process (no worker processes). The trainer's random
    generators (vLLM seeds Python's, NumPy's and torch's globally) and torch.set_num_threads (vLLM's CPU
    worker makes it a no-op for the whole process) are put back afterwards."""
    import random

    import numpy as np

    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(settings.kv_cache_gib)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    set_num_threads, python_state, numpy_state = (
        torch.set_num_threads,
        random.getstate(),
        np.random.get_state(),
    )
    try:
        with torch.random.fork_rng(devices=_cuda_devices()):
            yield
    finally:
        torch.set_num_threads = set_num_threads
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _cuda_devices() -> list[int]:
    return [torch.cuda.current_device()] if torch.cuda.is_available() else []


class VllmEngine:
    """A vLLM `LLM` on the policy's architecture, started on first use, and the weights version it holds."""

    def __init__(self, source: str, settings: EngineSettings, seed: int = 0) -> None:
        self.source, self.settings, self.seed = source, settings, seed
        self._llm: Any = None
        self._merged: MergedCopy | None = None
        self._merged_from: nn.Module | None = None  # the policy `_merged` was built from
        self.version: Any = None  # the weights version last pushed; None: the engine's from `source`
        self.pushes = 0
        self.last_push: dict[str, float] = {}

    @property
    def llm(self) -> Any:
        if self._llm is None:
            from vllm import LLM

            s = self.settings
            with _engine_environment(s):
                self._llm = LLM(
                    model=self.source,
                    dtype=s.dtype,
                    seed=self.seed,
                    enforce_eager=s.enforce_eager,
                    max_model_len=s.max_model_len,
                    enable_prefix_caching=s.prefix_caching,
                    gpu_memory_utilization=s.gpu_memory_utilization,
                    logprobs_mode="processed_logprobs",
                    # Sampling settings come from the rollout config only, never the model's
                    # generation_config.json (its eos ids, temperature, top-p).
                    generation_config="vllm",
                    disable_log_stats=True,
                )
        return self._llm

    def _plain(self, policy: nn.Module) -> nn.Module:
        """`policy` as a plain transformers model: LoRA adapters merged into a copy (the base shared)."""
        if can_merge(policy):
            if self._merged is None or self._merged_from is not policy:  # a copy is of one policy's layers
                self._merged, self._merged_from = MergedCopy(), policy
            return self._merged.refresh(policy)
        if hasattr(policy, "get_base_model"):
            raise ValueError(
                "rollout.engine=vllm: this LoRA policy's adapters cannot be merged into plain weights "
                "(DoRA or another variant, several adapters, or shards)"
            )
        return policy

    @torch.no_grad()
    def sync(self, policy: nn.Module, version: Any) -> dict[str, float]:
        """Push `policy`'s weights unless the engine holds `version` already: the push's seconds and bytes
        (empty when nothing was pushed)."""
        llm = self.llm
        if version is not None and version == self.version:
            return {}
        start = time.perf_counter()
        dtype = getattr(torch, self.settings.dtype)  # cast here: the engine copies them in its own dtype
        weights = [(name, t.detach().to(dtype)) for name, t in self._plain(policy).state_dict().items()]
        llm.llm_engine.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
        )
        self.version, self.pushes = version, self.pushes + 1
        self.last_push = {
            "seconds": time.perf_counter() - start,
            "bytes": float(sum(t.numel() * t.element_size() for _, t in weights)),
        }
        return dict(self.last_push)

    def generate(
        self,
        tokenizer: Tokenizer,
        prompts: list[str],
        options: SamplingOptions,
        generator: torch.Generator,
        device: torch.device,
    ) -> RolloutBatch:
        """`options.group_size` completions of each of `prompts` (greedy: one argmax decode each), as the
        built-in sampler's `RolloutBatch` on `device`; the draws are seeded from `generator`."""
        from vllm import SamplingParams

        if not prompts:
            raise ValueError("prompts must not be empty")
        greedy = options.greedy
        encoded = [encode_prompt(tokenizer, p) for p in prompts]
        eos_id = tokenizer.eos_token_id
        params = SamplingParams(
            n=options.group_size,
            temperature=0.0 if greedy else options.temperature,
            top_k=0 if greedy else options.top_k,  # 0: no filter, as the built-in sampler's
            top_p=1.0 if greedy else options.top_p,
            max_tokens=options.max_new_tokens,
            logprobs=0,  # the sampled token's own log-prob
            stop_token_ids=None if eos_id is None else [eos_id],
            ignore_eos=eos_id is None,
            detokenize=False,
        )
        seed = int(torch.randint(SEED_RANGE, (1,), generator=generator, device=generator.device))
        with torch.random.fork_rng(devices=_cuda_devices()):
            torch.manual_seed(seed)
            outputs = self.llm.generate(
                [{"prompt_token_ids": ids} for ids in encoded], params, use_tqdm=False
            )
        rows = [(ids, sample) for ids, out in zip(encoded, outputs, strict=True) for sample in out.outputs]
        batch = _rollout_batch(tokenizer, rows, options, eos_id)
        return _on_device(batch, device)


def _on_device(batch: RolloutBatch, device: torch.device) -> RolloutBatch:
    moved = {
        f: getattr(batch, f).to(device)
        for f in (
            "input_ids",
            "attention_mask",
            "position_ids",
            "labels",
            "old_logps",
            "truncated",
            "prompt_index",
        )
    }
    return dataclasses.replace(batch, **moved)


def _rollout_batch(
    tokenizer: Tokenizer,
    rows: list[tuple[list[int], Any]],  # [N] (prompt ids, vLLM's CompletionOutput), group_size per prompt
    options: SamplingOptions,
    eos_id: int | None,
) -> RolloutBatch:
    """The layout of `generate.generate`'s batch: prompts left-padded, completions (their EOS included)
    right-padded with the pad id, label -100 and log-prob 0."""
    pad_id = tokenizer.pad_token_id
    prompt_ids, prompt_mask = left_pad([ids for ids, _ in rows], pad_id, torch.device("cpu"))
    n, width = len(rows), max(1, max(len(sample.token_ids) for _, sample in rows))
    comp_ids = torch.full((n, width), pad_id, dtype=torch.long)
    comp_valid = torch.zeros((n, width), dtype=torch.bool)
    comp_logps = torch.zeros((n, width), dtype=torch.float32)
    truncated = torch.zeros(n, dtype=torch.bool)
    completion_ids = []
    for i, (_, sample) in enumerate(rows):
        ids = list(sample.token_ids)
        comp_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        comp_valid[i, : len(ids)] = True
        comp_logps[i, : len(ids)] = torch.tensor(
            [lp[t].logprob for lp, t in zip(sample.logprobs, ids, strict=True)]
        )
        ended = bool(ids) and eos_id is not None and ids[-1] == eos_id
        truncated[i] = not ended
        completion_ids.append(ids[:-1] if ended else ids)
    prompt_pos = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    comp_pos = (prompt_mask.sum(-1, keepdim=True) + torch.arange(width)) * comp_valid
    labels = torch.cat(
        [torch.full_like(prompt_ids, IGNORE_INDEX), comp_ids.masked_fill(~comp_valid, IGNORE_INDEX)], 1
    )
    return RolloutBatch(
        input_ids=torch.cat([prompt_ids, comp_ids], dim=1),
        attention_mask=torch.cat([prompt_mask, comp_valid.long()], dim=1),
        position_ids=torch.cat([prompt_pos, comp_pos], dim=1),
        labels=labels,
        old_logps=torch.cat([torch.zeros_like(prompt_ids, dtype=torch.float32), comp_logps], dim=1),
        completion_ids=completion_ids,
        completions=[tokenizer.decode(ids, skip_special_tokens=False) for ids in completion_ids],
        truncated=truncated,
        prompt_index=torch.arange(n // options.group_size).repeat_interleave(options.group_size),
        group_size=options.group_size,
        filtered_mass=None,  # the engine does not report the mass its top-k / top-p removed
        temperature=1.0 if options.greedy else options.temperature,
        top_k=0 if options.greedy else options.top_k,
        top_p=1.0 if options.greedy else options.top_p,
    )


def score_completions(
    engine: VllmEngine, prompt_ids: list[int], completions: list[list[int]]
) -> list[torch.Tensor]:
    """The engine's log-probs at temperature 1 of each fixed completion after `prompt_ids` (`[len]` each,
    its prompt log-probs): what a test compares with the trainer's forward after a push."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0, detokenize=False)
    outputs = engine.llm.generate(
        [{"prompt_token_ids": prompt_ids + c} for c in completions], params, use_tqdm=False
    )
    start = len(prompt_ids)
    return [
        torch.tensor([lp[t].logprob for lp, t in zip(out.prompt_logprobs[start:], c, strict=True)])
        for out, c in zip(outputs, completions, strict=True)
    ]
