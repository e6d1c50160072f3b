"""`resume=auto|PATH|null`: what a run does with its directory, and the checks before it continues one.

A checkpoint continues the experiment it came from, never another: the loss, task, policy and seed must be
the ones it was trained with, and the frozen reference rebuilt now (from the warm-start cache) must be bit
for bit the one it was trained against. Anything else may change (a longer `trainer.max_steps` extends a
finished run), and is listed in the log. Every refusal is a `UserError`: one line, exit 2, and the run
directory is left as it was (`run_dir_guard`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinkle_exp.errors import UserError
from twinkle_exp.lifecycle.checkpoints import LAST, RUN_KEY, last_checkpoint, read_checkpoint

log = logging.getLogger(__name__)

# What makes a checkpoint another experiment's: resuming with a different value is refused.
IDENTITY_KEYS = ("loss", "task", "policy", "seed")
# Settings whose saved state a checkpoint holds only for the value it was trained with (missing: 0).
FIXED_SETTINGS = ("rollout.staleness",)  # the ring of lagged weights (training/staleness.py)


@dataclass
class Start:
    """Where a run starts: from scratch (`checkpoint` None) or from a checkpoint's state."""

    checkpoint: Path | None = None
    run_info: dict[str, Any] = field(default_factory=dict)  # the checkpoint's RUN_KEY entry
    rollouts_done: int = 0

    @property
    def step(self) -> int:
        return int(self.run_info.get("global_step", 0))

    @property
    def csv_rows(self) -> int:
        """Rows of metrics.csv the checkpoint had seen: the ones a resumed run keeps."""
        return int(self.run_info.get("csv_rows", 0))


def find_start(resume: str | None, run_dir: Path) -> Start:
    """Read the checkpoint `resume` names: "auto" (this run directory's, if any), a file or run directory."""
    own = last_checkpoint(run_dir)
    if resume is None:
        if own.exists():
            raise UserError(
                f"resume=null, but {run_dir} already holds a checkpoint ({own}); pass resume=auto to continue "
                "that run, or choose another hydra.run.dir"
            )
        return Start()
    if resume == "auto":
        if not own.exists():
            return Start()
        path = own
    else:
        path = Path(resume).expanduser()
        if path.is_dir():  # a run directory, or its checkpoints directory
            path = path / LAST if (path / LAST).exists() else last_checkpoint(path)
        if not path.exists():
            raise UserError(f"resume={resume}: no checkpoint at {path}")
    checkpoint = read_checkpoint(path)
    try:
        run_info, rollouts_done = checkpoint[RUN_KEY], int(checkpoint["twinkle_module"]["rollouts_done"])
        int(run_info.get("global_step", 0)), int(run_info.get("csv_rows", 0)), dict(run_info["config"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UserError(
            f"resume: {path} is not a complete twinkle_exp checkpoint ({type(exc).__name__}: {exc})"
        ) from None
    return Start(checkpoint=path, run_info=run_info, rollouts_done=rollouts_done)


def _flatten(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, inner in value.items():
            flat |= _flatten(inner, f"{prefix}.{key}" if prefix else str(key))
        return flat
    return {prefix: value}


def config_differences(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """`{dotted key: (checkpoint's value, this run's)}` for every setting that differs."""
    old, new = _flatten(saved, ""), _flatten(current, "")
    return {
        key: (old.get(key), new.get(key))
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    }


def identity_differences(start: Start, config: dict[str, Any]) -> str:
    """The loss, task, policy and seed settings where `config` differs from the checkpoint's, as
    "key: old there, new here; ..." (empty when it is the same experiment)."""
    differences = config_differences(start.run_info["config"], config)
    refused = {k: v for k, v in differences.items() if k.split(".", 1)[0] in IDENTITY_KEYS}
    return "; ".join(f"{k}: {old!r} there, {new!r} here" for k, (old, new) in list(refused.items())[:4])


def check_resume_config(start: Start, config: dict[str, Any]) -> None:
    """Refuse a resume whose loss, task, policy or seed differ from the checkpoint's; log other changes.

    `config`: this run's resolved config as plain containers (without Hydra's own `hydra` node).
    """
    if start.checkpoint is None:
        return
    differences = config_differences(start.run_info["config"], config)
    listed = identity_differences(start, config)
    if listed:
        raise UserError(
            f"resume refused: {start.checkpoint} belongs to another experiment ({listed}). The loss, task, "
            "policy and seed must match the checkpoint's; to change them start a new run directory"
        )
    for key in FIXED_SETTINGS:
        old, new = differences.get(key, (0, 0))
        if (old or 0) != (new or 0):
            raise UserError(
                f"resume refused: {start.checkpoint} was trained with {key}={old or 0} and this run has "
                f"{key}={new}; the checkpoint holds the state of its own value only. Resume with "
                f"{key}={old or 0}, or start a new run directory"
            )
    for key in ("resume", "previous_run"):  # how to start, not what is run
        differences.pop(key, None)
    if differences:
        listed = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in differences.items())
        log.warning("resume: settings changed since the checkpoint: %s", listed)


def check_warmup_cache(start: Start) -> None:
    """The frozen reference is rebuilt from the warm-start cache: a missing file would be retrained."""
    warm = start.run_info.get("warmup") or {}
    if start.checkpoint is None or not start.run_info.get("reference_digest") or not warm.get("path"):
        return
    if not Path(warm["path"]).exists():
        raise UserError(
            f"resume: the warm-start cache {warm['path']} that this run's frozen reference was built from is "
            "missing. Restore that file (or set TWINKLE_CACHE / warmup.cache_dir to the directory holding it) "
            "and rerun; training it again could give a different reference, so the run does not"
        )


def check_reference(start: Start, digest: str | None) -> None:
    """Refuse a resume whose rebuilt reference is not bit-identical to the checkpoint's."""
    if start.checkpoint is None:
        return
    saved = start.run_info.get("reference_digest")
    if saved != digest:
        raise UserError(
            f"resume refused: the frozen reference built now differs from the one {start.checkpoint} was "
            "trained against (was the warm-start cache replaced or retrained?); restore the original cache "
            "file or start a new run directory"
        )


def check_world_size(start: Start, world_size: int) -> None:
    """Refuse, before the warm-start, a resume on another number of processes than the checkpoint's."""
    saved = start.run_info.get("world_size")
    if start.checkpoint is not None and saved is not None and int(saved) != world_size:
        raise UserError(
            f"resume refused: {start.checkpoint} was written by {saved} process(es) and this run has "
            f"{world_size}: resume on as many processes (trainer.devices, trainer.num_nodes), or start a new "
            "run directory"
        )
