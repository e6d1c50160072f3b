"""Supervised warm-start on the task's gold answers, cached on disk by everything that determines it.

Real RL pipelines start from an SFT model; the warm-started policy is also the frozen reference. Every seed
and every loss of a sweep shares one warm-start, so the cache key leaves out the RL seed and the loss
(`warmup_cache` holds the key and the file handling).
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path
from typing import Any

import torch

from twinkle_exp.config.schema import WarmupConfig
from twinkle_exp.lifecycle import signals
from twinkle_exp.logprobs import IGNORE_INDEX, shift_logits_to_labels
from twinkle_exp.models import encode_prompt
from twinkle_exp.parallel import collectives
from twinkle_exp.policy.build import Policy
from twinkle_exp.tasks import Example, Task
from twinkle_exp.training import warmup_cache

log = logging.getLogger(__name__)
RANK_WAIT_S = 6 * 3600  # how long the other ranks wait for rank 0's warm-start (a large model's is long)


def supervised_batch(policy: Policy, examples: list[Example]) -> tuple[torch.Tensor, ...]:
    """Right-padded `[B, T]` input_ids, attention_mask and labels (-100 on prompt and padding) for SFT."""
    tok = policy.tokenizer
    rows, labels = [], []
    for ex in examples:
        prompt = encode_prompt(tok, ex.prompt)
        target = tok.encode(ex.answer if ex.demonstration is None else ex.demonstration) + [tok.eos_token_id]
        rows.append(prompt + target)
        labels.append([IGNORE_INDEX] * len(prompt) + target)
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tok.pad_token_id)
    lab = torch.full((len(rows), width), IGNORE_INDEX)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, label) in enumerate(zip(rows, labels, strict=True)):
        ids[i, : len(row)], lab[i, : len(row)], mask[i, : len(row)] = (
            torch.tensor(row),
            torch.tensor(label),
            1,
        )
    return ids, mask, lab


def supervised_train(
    policy: Policy, task: Task, *, steps: int, batch_size: int, lr: float, seed: int
) -> float:
    """Cross-entropy on gold completions (the answer, or the example's demonstration, + EOS); returns the last step's loss.

    A signal (signals.py) stops it before the next step: the caller sees `signals.received()`.
    """
    model = policy.model
    device = next(model.parameters()).device
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    loss = torch.tensor(float("nan"))
    for done in range(steps):
        if signals.received() is not None:
            log.warning("warm-start stopped after %d of %d steps: it is not cached", done, steps)
            break
        ids, mask, labels = (t.to(device) for t in supervised_batch(policy, task.sample(batch_size, rng)))
        logits = model(ids, attention_mask=mask).logits
        logps = shift_logits_to_labels(logits, labels)
        loss = -(logps.sum() / (labels != IGNORE_INDEX).sum())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return float(loss.detach())


def warm_start(
    policy: Policy, task: Task, cfg: WarmupConfig, key: str, trains: bool = True
) -> dict[str, Any]:
    """Load the cached warm-start for `key`, or train it and cache it. Returns what happened, for the logs.

    `trains=False` (every data-parallel rank but global rank 0) never trains: it waits for the cache.
    """
    path = Path(os.path.expanduser(cfg.cache_dir)) / f"warmup-{key}.pt"
    if not trains:
        collectives.wait_for_file(path, RANK_WAIT_S, "the warm-start", stop=signals.received)
        if signals.received() is not None:
            return {"path": None, "cached": False, "interrupted": True}
        if not warmup_cache.load(path, policy.model):
            raise RuntimeError(f"the warm-start cache {path} that global rank 0 wrote is unusable")
        log.info("warm-start: reused %s", path)
        return {"path": str(path), "cached": True}
    with warmup_cache.locked(path):
        if warmup_cache.load(path, policy.model):
            log.info("warm-start: reused %s", path)
            return {"path": str(path), "cached": True}
        log.info("warm-start: %d supervised steps (cache miss, writing %s)", cfg.steps, path)
        loss = supervised_train(
            policy, task, steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed
        )
        if signals.received() is not None:  # a part of a warm-start must never be reused as the whole
            return {"path": None, "cached": False, "interrupted": True}
        warmup_cache.save(policy.model, path)
    return {"path": str(path), "cached": False, "final_loss": loss}
