"""Checkpoints: when they are written, what the run adds to Lightning's, atomic files, finding and reading them.

Lightning's checkpoint holds the policy, the optimizer, the scheduler and the loops (`global_step`);
`PolicyModule` adds its counters, the rollout in progress and every random state (`on_save_checkpoint`);
this callback adds what the run knows: the config (to refuse resuming another experiment), a digest of the
reference policy, and how many rows metrics.csv had, so a resumed run knows which rows to keep.

Every checkpoint replaces `<run dir>/checkpoints/last.ckpt` through a rename, so a crash while writing
leaves the previous one intact, and leaves `last.ckpt.sha256` beside it (`cache_files.replace_with_digest`:
whenever a crash comes, the file there matches it); a resume checks the bytes against it first, since the
file is memory-mapped and a changed byte would otherwise go unnoticed. Checkpoints fall between rollouts (every `trainer.checkpoint_every`
optimizer steps, rounded up to the end of a rollout), at the end of training, and after the optimizer step
at which a signal or non-finite values stop training.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from twinkle_exp.errors import UserError
from twinkle_exp.models.cache_files import DIGEST_SUFFIX, digest_problem, read_digests, replace_with_digest
from twinkle_exp.tracking.disk_space import full_error, is_full, serialized_size

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"
LAST = "last.ckpt"
FORMAT = 1  # bump when what a checkpoint holds changes incompatibly
RUN_KEY = "twinkle_run"  # the run's entry in the checkpoint dict (the module's is "twinkle_module")


def last_checkpoint(run_dir: Path) -> Path:
    return run_dir / CHECKPOINT_DIR / LAST


def weights_digest(model: torch.nn.Module | None) -> str | None:
    """sha256 of a model's parameters and buffers, bit for bit (None for no model)."""
    if model is None:
        return None
    digest = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def check_digest(path: Path) -> None:
    """Refuse a checkpoint whose bytes are not the ones written (its `.sha256` file); warn when it has none."""
    if not path.is_file():
        return
    if read_digests(path) is None:
        log.warning("resume: %s has no %s file beside it: its bytes cannot be checked", path, DIGEST_SUFFIX)
        return
    problem = digest_problem(path)
    if problem is None:
        return
    older = [
        p
        for p in sorted(path.parent.glob("*.ckpt"))
        if p != path and read_digests(p) is not None and digest_problem(p) is None
    ]
    if older:
        way_out = f"an older intact checkpoint is {older[-1]}: resume={older[-1]} continues from it"
    else:
        way_out = "no older checkpoint is kept: restore the file from a copy, or start a new run directory"
    raise UserError(
        f"resume refused: {path} does not match its digest ({problem}): its bytes changed after it was "
        f"written (a disk or copy fault, or an edit); {way_out}"
    )


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint at `path` once its digest is checked, memory-mapped (tensors read only when touched)."""
    check_digest(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except FileNotFoundError:
        raise UserError(f"resume: no checkpoint at {path}") from None
    except Exception as exc:  # a truncated or foreign file: say which file, not only torch's reason
        raise UserError(
            f"resume: {path} is not a readable checkpoint ({type(exc).__name__}: {exc})"
        ) from None
    if not isinstance(checkpoint, dict) or RUN_KEY not in checkpoint:
        raise UserError(f"resume: {path} is not a twinkle_exp checkpoint (no {RUN_KEY!r} entry)")
    info = checkpoint[RUN_KEY]
    found = info.get("format") if isinstance(info, dict) else None
    if found != FORMAT:
        raise UserError(
            f"resume: {path} has checkpoint format {found}, this version reads format {FORMAT}; start a new run"
        )
    return checkpoint


class CheckpointCallback(Callback):
    """Writes `last.ckpt` between rollouts when one is due; `run_info` is stored in every checkpoint.

    `rows_written` returns how many data rows metrics.csv holds (all logged rows, flushed) at that moment.
    """

    def __init__(self, run_dir: Path, every: int | None, run_info: dict[str, Any], rows_written: Any) -> None:
        if every is not None and every < 0:
            raise ValueError(f"trainer.checkpoint_every must be >= 0 or null, got {every}")
        self.path = last_checkpoint(run_dir)
        self.every = every or 0
        self.run_info = run_info
        self.rows_written = rows_written
        self._counted_from = 0  # the step of the last checkpoint, or where training started
        self._dumped: dict[str, Any] | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._counted_from = trainer.global_step  # a resumed run does not rewrite the checkpoint it came from

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, idx: int
    ) -> None:
        step = trainer.global_step
        due = self.every > 0 and step // self.every > self._counted_from // self.every
        if pl_module.end.reason is not None or pl_module.end.done(step) or due:
            self.save(trainer)

    def _needed(self) -> int | None:
        return None if self._dumped is None else serialized_size(self._dumped)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self._dumped = checkpoint  # what is being written: its size, if the disk fills up
        checkpoint[RUN_KEY] = self.run_info | {
            "format": FORMAT,
            "global_step": trainer.global_step,
            "csv_rows": self.rows_written(),
            "world_size": trainer.world_size,
            "stop_reason": pl_module.end.reason,
        }

    def save(self, trainer: L.Trainer) -> Path:
        """Write the checkpoint (every rank takes part; global rank 0 writes) and rename it into place."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        if trainer.is_global_zero:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            trainer.save_checkpoint(tmp, weights_only=False)
            if trainer.is_global_zero:
                with open(tmp, "rb+") as f:  # on disk before the rename makes it the checkpoint
                    os.fsync(f.fileno())
                replace_with_digest(tmp, self.path)
        except OSError as exc:
            if not is_full(exc):
                raise
            # The previous checkpoint is still there, intact: only the part-written one goes.
            for leftover in self.path.parent.glob(f"{self.path.name}*.tmp"):
                leftover.unlink(missing_ok=True)
            raise full_error(self.path, self._needed(), exc) from None
        finally:
            self._dumped = None
        trainer.strategy.barrier("twinkle_checkpoint")
        self._counted_from = trainer.global_step
        return self.path
