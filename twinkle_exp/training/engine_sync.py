"""`rollout.engine=vllm` in the RL step: which weights the engine must hold, pushed lazily before it samples.

A rollout's weights version is the lagged copy in use (`rollout.staleness`: the optimizer step it was taken
at), the optimizer steps this process has taken (a hook on every torch optimizer: the fused AdamW kernel
leaves the parameters' in-place version counters alone) and each trainable parameter's storage and version
counter (a checkpoint loaded into the live module copies in place). The engine pushes only when that differs
from the version it holds, so nothing is pushed when no step ran, a resumed run (a fresh engine) pushes its
restored weights before its first rollout, and staleness k pushes the lagged weights.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from twinkle_exp import metric_names as M
from twinkle_exp.parallel import collectives
from twinkle_exp.sampling.generate import RolloutBatch, SamplingOptions
from twinkle_exp.sampling.vllm_engine import VllmEngine
from twinkle_exp.training.staleness import LaggedPolicy

_optimizer_steps = 0  # optimizer steps this process has taken, every torch optimizer counted
_hooked = False


def _count_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    global _optimizer_steps
    _optimizer_steps += 1


def weights_version(policy: nn.Module, lagged: LaggedPolicy) -> tuple[Any, ...]:
    """What identifies the weights `policy` holds now (inside `lagged.weights`, the lagged ones)."""
    held = lagged.ring[0].step if lagged.ring else None
    trainable = tuple((p.data_ptr(), p._version) for p in policy.parameters() if p.requires_grad)
    return held, _optimizer_steps, trainable


class EngineSync:
    """The run's engine, the version it holds, and the pushes since the last rollout's metrics."""

    def __init__(self, engine: VllmEngine) -> None:
        global _hooked
        if not _hooked:
            register_optimizer_step_post_hook(_count_step)
            _hooked = True
        self.engine = engine
        self.pushed = {"seconds": 0.0, "bytes": 0.0}

    def sample(
        self, policy: nn.Module, lagged: LaggedPolicy, tokenizer: Any, prompts: list[str],
        options: SamplingOptions, generator: torch.Generator, device: torch.device,
    ) -> RolloutBatch:  # fmt: skip
        """Push `policy`'s weights if the engine's are older, then sample with the engine."""
        for key, value in self.engine.sync(policy, weights_version(policy, lagged)).items():
            self.pushed[key] += value
        return self.engine.generate(tokenizer, prompts, options, generator, device)

    def metrics(self, old_logps: torch.Tensor, rollout: RolloutBatch) -> dict[str, float]:
        """The pushes' seconds (the slowest rank's) and bytes since the last call, 0 when none, and the
        importance ratio pi_old / pi_sampler over the rollout's completion tokens, every rank's (every rank
        calls it together). `old_logps` `[N, P + C]`: the trainer's (recomputed: the engine always counts as a
        sampler that can differ, training/old_logps.py)."""
        out = collectives.max_over_ranks(
            {M.TIME_ENGINE_PUSH: self.pushed["seconds"], M.ENGINE_PUSH_BYTES: self.pushed["bytes"]}
        )
        self.pushed = {"seconds": 0.0, "bytes": 0.0}
        mask = rollout.completion_mask
        log_ratio = (old_logps - rollout.old_logps)[mask].double()  # [tokens]
        low, high = (
            collectives.all_reduce(log_ratio.min().reshape(1), "min"),
            collectives.all_reduce(log_ratio.max().reshape(1), "max"),
        )
        sums = collectives.all_reduce(
            torch.stack([log_ratio.exp().sum(), log_ratio.new_tensor(float(log_ratio.numel()))]), "sum"
        )
        out[M.SAMPLER_RATIO_MIN], out[M.SAMPLER_RATIO_MAX] = float(low.exp()), float(high.exp())
        out[M.SAMPLER_RATIO_MEAN] = float(sums[0] / sums[1])
        return out
