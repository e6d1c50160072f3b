"""What this machine has that the config asks for: a GPU, the policy's model file, vLLM, a wandb login."""

from __future__ import annotations

import netrc
import os
from collections.abc import Iterator
from typing import Any

from twinkle_exp.config.checks.engine import engine_problems


def environment_problems(plain: dict[str, Any], policy: str | None) -> Iterator[str]:
    """`plain`: the composed config's groups as resolved dicts; `policy`: the registered policy it chose."""
    accelerator = str(plain["trainer"]["accelerator"])
    if accelerator in ("gpu", "cuda"):
        import torch

        if not torch.cuda.is_available():
            yield f"trainer.accelerator={accelerator}: no GPU is visible here (use trainer=cpu)"
    if policy == "hf":
        from twinkle_exp.models.gguf import source_problems

        yield from source_problems(plain["policy"])
    yield from engine_problems(plain, policy)
    logger = plain["logger"]
    if logger["wandb"] and logger["mode"] == "online" and not _wandb_logged_in():
        yield "logger.mode=online: wandb has no login here; run `wandb login`, or WANDB_MODE=offline, or logger=csv"


def _wandb_logged_in() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False
