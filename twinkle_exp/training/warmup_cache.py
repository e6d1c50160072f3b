"""The warm-start cache: a key over everything the warm-start depends on, and safe reads and writes.

Jobs of a sweep share one warm-start. The key covers the content it was trained on (the task's data files,
the tokenizer's vocabulary, the model's config), not only their names, so editing a data file in place
retrains it, and the source of the code that builds it (`WARM_START_CODE`: the warm-start loop, the models, the
tokenizers, the tasks' prompts and gold completions), so a change there retrains it too. Files are written atomically (temp file + rename) and readable by the group; one job trains
while the others wait on a lock; an unreadable or foreign file is rebuilt with a warning naming it, and so
is one whose bytes no longer match the sha256 digest written beside it (`warmup-<key>.pt.sha256`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from twinkle_exp.config.schema import WarmupConfig
from twinkle_exp.models.cache_files import (
    digest_problem,
    locked,
    readable_by_group,
    replace_with_digest,
)
from twinkle_exp.policy.build import Policy
from twinkle_exp.tasks import Task
from twinkle_exp.tracking.disk_space import full_error, is_full, serialized_size

log = logging.getLogger(__name__)
__all__ = ["cache_key", "load", "locked", "save"]
CACHE_FORMAT = 2  # bump when the key's layout changes, so old files are not reused
_PACKAGE = Path(__file__).resolve().parents[1]
# Relative to the package: what the warm-start's weights depend on besides the config and the data files.
# A comment edited there retrains it too: a wasted minute beats a cache that outlives the code it came from.
WARM_START_CODE = ("training/warmup.py", "models", "tasks", "policy")


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, default=str).encode()


def _model_config(model: nn.Module) -> Any:
    config = getattr(model, "config", None)
    if config is None:
        return type(model).__name__
    return config.to_dict() if hasattr(config, "to_dict") else vars(config)


def _vocabulary(tokenizer: Any) -> Any:
    inner = getattr(tokenizer, "tokenizer", tokenizer)  # a Hugging Face tokenizer behind the adapter
    if hasattr(inner, "get_vocab"):
        return sorted(inner.get_vocab().items())
    return [tokenizer.decode([i], skip_special_tokens=False) for i in range(tokenizer.vocab_size)]


def code_digest() -> str:
    """sha256 over the source files of `WARM_START_CODE`, with their paths, in a fixed order."""
    digest = hashlib.sha256()
    for entry in WARM_START_CODE:
        root = _PACKAGE / entry
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            digest.update(str(path.relative_to(_PACKAGE)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key(policy_cfg: dict, task_cfg: dict, warmup: WarmupConfig, policy: Policy, task: Task) -> str:
    """Digest of the policy's and task's resolved configs, the procedure, and the content they stand for."""
    digest = hashlib.sha256(_json({"format": CACHE_FORMAT, "policy": policy_cfg, "task": task_cfg}))
    procedure = dataclasses.asdict(warmup)
    digest.update(_json({k: v for k, v in procedure.items() if k not in ("cache_dir", "enabled")}))
    digest.update(_json(_model_config(policy.model)))
    digest.update(_json(_vocabulary(policy.tokenizer)))
    digest.update(code_digest().encode())
    for path in task.data_files():
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:16]


def load(path: Path, model: nn.Module) -> bool:
    """Load `path` into `model` if it is a readable state dict of exactly this model; else warn and say no.

    The weights are checked before any is copied, so a foreign file leaves the model as it was.
    """
    if not path.exists():
        return False
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        expected = model.state_dict()
        if not isinstance(state, dict) or state.keys() != expected.keys():
            raise ValueError("it holds other weights than this model's")
        wrong = [k for k, v in state.items() if v.shape != expected[k].shape]
        if wrong:
            raise ValueError(
                f"{wrong[0]} has shape {tuple(state[wrong[0]].shape)}, not {tuple(expected[wrong[0]].shape)}"
            )
        # A file of the right shapes can still hold changed bytes: a changed weight loads without a word.
        problem = digest_problem(path)
        if problem is not None:
            raise ValueError(f"its bytes changed since it was written: {problem}")
    except Exception as exc:  # truncated, corrupt or foreign: rebuild rather than fail every later run
        log.warning("warm-start cache %s is unusable (%s): training it again", path, exc)
        return False
    model.load_state_dict(state)
    return True


def save(model: nn.Module, path: Path) -> None:
    """Write then rename, so no reader ever sees a half-written file; readable like any file the user makes.

    The caller holds `locked(path)`, so any temporary file of this entry already there was left by a writer
    that was killed mid-write (SIGKILL, out of memory, power off): it is removed."""
    for stale in path.parent.glob(f"{path.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    tmp = None
    try:
        with tempfile.NamedTemporaryFile(
            dir=path.parent, prefix=f"{path.name}.", suffix=".tmp", delete=False
        ) as tmp:
            try:
                torch.save(model.state_dict(), tmp)
            except BaseException:  # a second Ctrl-C, a full disk: no half-written file left behind
                os.unlink(tmp.name)
                raise
        readable_by_group(tmp.name)  # mkstemp's 0600 would hide it from the group's other jobs
        replace_with_digest(Path(tmp.name), path)
    except OSError as exc:
        if not is_full(exc):
            raise
        if tmp is not None:
            Path(tmp.name).unlink(missing_ok=True)
        raise full_error(path, serialized_size(model.state_dict()), exc) from None
