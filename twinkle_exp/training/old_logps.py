"""The loss's old log-probs: the sampler's, or recomputed by the update's own forward so on-policy r == 1.

The sampler decodes token by token with a KV cache; the update runs one full forward. In float32 the two
agree to ~1e-6, but under bf16/fp16 autocast they differ by ~1e-2 per token, and with dropout active in
the update they differ arbitrarily: then an update that is exactly on-policy has ratios that are not 1, and
clipping, SAPO's gate and GSPO's sequence ratio react to noise. Recomputing the old log-probs with the
update's forward (same precision, same micro-batch shapes, dropout off) makes them agree exactly.
"""

from __future__ import annotations

import torch
from torch import nn

from twinkle_exp.config.schema import OLD_LOGPS_MODES
from twinkle_exp.policy.logprobs import sequence_logps
from twinkle_exp.policy.shared_prefix import PrefixIndex
from twinkle_exp.sampling.generate import RolloutBatch

FULL_PRECISION = ("32-true", "32", "64-true", "64")


def has_dropout(model: nn.Module) -> bool:
    """Whether `model` drops anything in train mode: a dropout module, or a config's `*dropout`/`*pdrop` > 0
    (Hugging Face attention applies its dropout functionally, from the config)."""
    if any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules()):
        return True
    config = getattr(model, "config", None)
    settings = config.to_dict() if hasattr(config, "to_dict") else vars(config) if config is not None else {}
    return any(
        ("dropout" in key or "pdrop" in key) and isinstance(value, float) and value > 0
        for key, value in settings.items()
    )


def should_recompute(mode: str, precision: str, model: nn.Module) -> bool:
    """`optim.old_logps`: "auto" recomputes when the sampler and the update can differ numerically."""
    if mode not in OLD_LOGPS_MODES:
        raise ValueError(f"optim.old_logps must be one of {list(OLD_LOGPS_MODES)}, got {mode!r}")
    if mode != "auto":
        return mode == "recompute"
    return str(precision) not in FULL_PRECISION or has_dropout(model)


@torch.no_grad()
def recompute_old_logps(
    model: nn.Module,
    b: RolloutBatch,
    micro_batches: list[torch.Tensor],
    prefixes: PrefixIndex,
    temperature: float,
) -> torch.Tensor:
    """`[N, P + C]` log-probs of `b.labels` under `model` as it is now, computed micro-batch by micro-batch.

    `micro_batches` (`[n_i]` row indices on the CPU, covering every row) should be the first optimizer
    step's own split, and `prefixes` the update's, so that step's forward repeats this one exactly and its
    ratios are exactly 1.
    """
    old = torch.zeros_like(b.old_logps)
    for cpu_rows in micro_batches:
        rows = cpu_rows.to(old.device)
        old[rows], _ = sequence_logps(
            model,
            b.input_ids[rows],
            b.attention_mask[rows],
            b.position_ids[rows],
            b.labels[rows],
            temperature=temperature,
            prefix=prefixes.for_rows(cpu_rows, old.device),
        )
    return old
