"""The loss's old log-probs: the sampler's, or recomputed by the update's own forward so on-policy r == 1.

The sampler decodes token by token with a KV cache; the update runs one full forward. In float32 the two
agree to ~1e-6, but with 16-bit weights or under bf16/fp16 autocast they differ by ~1e-2 per token, and
the update's own passes differ from each other when one shares prompts (`shared_prefix`) and the other
does not: then an update that is exactly on-policy has ratios that are not 1, and clipping, SAPO's gate
and GSPO's sequence ratio react to noise. The recompute runs the first optimizer step's forward itself:
the model in the update's mode (`set_update_mode`, so checkpointed layers are marked as training and take
the same full forward), the same micro-batches, the same shared prompts, the run's precision. Only the
gradient is off, and dropout: with `optim.update_dropout=true` the update draws dropout masks that no
earlier pass can know, so its ratios are never exactly 1, whatever the old log-probs (the
start-up warning says so); the recompute still removes the sampler's part of the gap.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from twinkle_exp.config.schema import OLD_LOGPS_MODES
from twinkle_exp.models.backbone import unwrap_peft
from twinkle_exp.models.hf import set_update_mode
from twinkle_exp.policy.logprobs import sequence_logps
from twinkle_exp.policy.shared_prefix import PrefixIndex
from twinkle_exp.sampling.generate import RolloutBatch

log = logging.getLogger(__name__)
FULL_PRECISION = ("32-true", "32", "64-true", "64")
FULL_DTYPES = (torch.float32, torch.float64)


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


def has_checkpointing(model: nn.Module) -> bool:
    """Whether some layer of `model` checkpoints its activations when it trains (transformers' flag)."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in unwrap_peft(model).modules())


def recompute_reasons(
    precision: str, model: nn.Module, sampler_dtype: str | None = None, engine: str = "builtin"
) -> list[str]:
    """Why the sampler's log-probs can differ from the update's forward here; empty: they agree to ~1e-6.
    Another engine (`rollout.engine=vllm`) runs other kernels, whatever its dtype: always a reason."""
    reasons = [f"rollout.sampler_dtype={sampler_dtype}"] if sampler_dtype else []
    if engine != "builtin":
        reasons.append(f"rollout.engine={engine}")
    if str(precision) not in FULL_PRECISION:
        reasons.append(f"trainer.precision={precision}")
    dtypes = sorted(
        {str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.dtype not in FULL_DTYPES}
    )
    if dtypes:
        reasons.append(f"{'/'.join(dtypes)} parameters")
    if torch.get_float32_matmul_precision() != "highest":
        # TF32 (or bf16) float32 matmuls round like 16-bit ones, and the two passes' shapes differ.
        reasons.append(f"float32 matmul precision {torch.get_float32_matmul_precision()!r}")
    if has_dropout(model):
        reasons.append("dropout")
    if has_checkpointing(model):
        reasons.append("gradient checkpointing")
    return reasons


def should_recompute(
    mode: str,
    precision: str,
    model: nn.Module,
    *,
    correction: str = "none",
    sampler_dtype: str | None = None,
    engine: str = "builtin",
) -> bool:
    """`optim.old_logps`: "auto" recomputes when the sampler and the update can differ (`recompute_reasons`),
    and whenever a rollout `correction` is on: its weights compare the recomputed log-probs with the sampler's.
    """
    if mode not in OLD_LOGPS_MODES:
        raise ValueError(f"optim.old_logps must be one of {list(OLD_LOGPS_MODES)}, got {mode!r}")
    if correction != "none" and mode == "sampler":
        raise ValueError(
            f"optim.rollout_correction.mode={correction} needs recomputed old log-probs, not optim.old_logps=sampler"
        )
    if mode != "auto":
        return mode == "recompute"
    return correction != "none" or bool(recompute_reasons(precision, model, sampler_dtype, engine))


def recompute_for_run(
    mode: str,
    precision: str,
    model: nn.Module,
    correction: str,
    sampler_dtype: str | None,
    dropout: bool,
    engine: str = "builtin",
) -> bool:
    """`should_recompute` for a run that starts training, warning of settings whose on-policy ratios are
    not 1 (`dropout`: optim.update_dropout)."""
    recompute = should_recompute(
        mode, precision, model, correction=correction, sampler_dtype=sampler_dtype, engine=engine
    )
    reasons = recompute_reasons(precision, model, sampler_dtype, engine)
    if reasons and mode == "sampler":
        log.warning(
            "optim.old_logps=sampler with %s: the sampler's log-probs differ from the update's, so "
            "on-policy ratios are not 1 (optim.old_logps=auto recomputes them)",
            ", ".join(reasons),
        )
    if dropout and has_dropout(model):
        log.warning("optim.update_dropout=true: dropout is on in the update, so on-policy ratios are not 1")
    return recompute


@torch.no_grad()
def recompute_old_logps(
    model: nn.Module,
    b: RolloutBatch,
    micro_batches: list[torch.Tensor],
    prefixes: PrefixIndex,
    temperature: float,
) -> torch.Tensor:
    """`[N, P + C]` log-probs of `b.labels` under `model` as it is now, computed micro-batch by micro-batch
    in the update's mode without dropout (it leaves `model` in that mode).

    `micro_batches` (`[n_i]` row indices on the CPU, covering every row) should be the first optimizer
    step's own split, and `prefixes` the update's, so that step's forward repeats this one exactly and its
    ratios are exactly 1.
    """
    set_update_mode(model, dropout=False)
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
