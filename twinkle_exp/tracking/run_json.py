"""The run directory's contract: run.json (status, attempts, final figures), the job's identity in its sweep.

The offline report reads runs through this module alone, so it imports nothing of the trainer.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinkle_exp.tracking.disk_space import full_error, is_full

RUN_JSON = "run.json"  # the run's status, attempts and final figures (`RunStatus`)
METRICS_CSV = "metrics.csv"  # one row per logged step, beside run.json (tracking.metrics_file)
PROVENANCE = "provenance"  # run.json's record of what produced the run (tracking.provenance)
# The provenance fields two compared runs must share: the report refuses a mix unless told otherwise.
PROVENANCE_KEYS = ("commit", "dirty", "threads", "cpu", "accelerator", "blas", "warm_start_key")
# A run moved aside by `previous_run=move_aside` lives in `<dir>` + this + `<time>`: not a job of its sweep.
MOVED_ASIDE = ".previous-"
IDENTITY = "identity"  # run.json's record of the run's `.hydra/` files (tracking.hydra_record.identity)
RESERVE_BYTES = 4096  # blanks after run.json's object: room for its final rewrite on a full disk


@dataclass
class JobInfo:
    """Who this job is within its sweep, read from Hydra's runtime config when there is one."""

    output_dir: Path
    overrides: list[str] = field(default_factory=list)
    choices: dict[str, str] = field(default_factory=dict)
    sweep_dir: str | None = None
    multirun: bool = False
    task_overrides: list[str] = field(default_factory=list)  # all of them, as typed (the resume command)

    @property
    def name(self) -> str:
        return ",".join(self.overrides) or "default"

    @classmethod
    def from_hydra(cls, fallback_dir: str | os.PathLike = ".") -> JobInfo:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if not HydraConfig.initialized():
            return cls(output_dir=Path(fallback_dir))
        hc = HydraConfig.get()
        # The overrides that name the job: those Hydra also uses for its directory name (a sweep file's
        # `+sweep=...` is excluded there, so it does not end up in every run name and report row).
        excluded = set(hc.job.config.override_dirname.exclude_keys)
        overrides = [o for o in hc.overrides.task if override_key(o) not in excluded]
        choices = {
            k: v
            for k, v in hc.runtime.choices.items()
            if v is not None and not k.startswith(("hydra", "schema/"))
        }
        return cls(
            output_dir=Path(hc.runtime.output_dir),
            overrides=overrides,
            choices=choices,
            sweep_dir=hc.sweep.dir,
            multirun=hc.mode == RunMode.MULTIRUN,
            task_overrides=list(hc.overrides.task),
        )


def override_key(override: str) -> str:
    """The config key an override sets: "+loss.tau=0.5" -> "loss.tau" (+, ++ and ~ set the same key)."""
    return override.split("=", 1)[0].lstrip("+~").strip()


def run_wandb_id(previous: dict[str, Any], resumed_from: str | None) -> str:
    """A fresh start is a new wandb run; a resumed one writes to the run it continues (`previous`: run.json)."""
    return (resumed_from and previous.get("wandb_id")) or secrets.token_hex(4)


class RunStatus:
    """`<output_dir>/run.json`: running / finished / failed / interrupted, which the report reads.

    A resumed run keeps what the file said and appends an attempt: `attempts` lists each one (when it
    started, from which checkpoint and step, how it ended), `wall_time_s` adds them up, and `wandb_id` stays
    the same so every attempt writes to one wandb run.

    `write=False` (every rank but global rank 0) keeps the bookkeeping and writes nothing.
    """

    def __init__(
        self,
        job: JobInfo,
        seed: int,
        resumed_from: str | None = None,
        start_step: int = 0,
        write: bool = True,
        wandb_id: str | None = None,
        identity: dict[str, Any] | None = None,
    ) -> None:
        self.path = job.output_dir / RUN_JSON
        self.write = write
        self.started = time.time()
        previous = read_run_json(self.path)
        attempts = [a for a in previous.get("attempts", []) if isinstance(a, dict)]
        self.earlier_wall_time = sum(a.get("wall_time_s") or 0.0 for a in attempts)
        now = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started))
        self.attempt: dict[str, Any] = {
            "started_at": now,
            "resumed_from": resumed_from,
            "start_step": start_step,
            "status": "running",
            "wall_time_s": None,
            "error": None,
        }
        self.data: dict[str, Any] = {
            "status": "running",
            "overrides": job.overrides,
            "loss": job.choices.get("loss"),
            "seed": seed,
            "started_at": previous.get("started_at") or now,
            "wall_time_s": None,
            "error": None,
            "attempt": len(attempts) + 1,
            "attempts": [*attempts, self.attempt],
            "wandb_id": wandb_id or run_wandb_id(previous, resumed_from),
        }
        if identity is not None:  # what `.hydra/` holds (tracking.hydra_record): the report checks the two
            self.data[IDENTITY] = identity
        self._write()

    @property
    def wandb_id(self) -> str:
        return self.data["wandb_id"]

    def _write(self) -> None:
        if not self.write:  # under DDP every rank runs this; one writer, or attempts multiply
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        text = json.dumps(self.data, indent=2)
        try:
            with open(tmp, "w") as f:
                # Trailing blanks (JSON allows them) keep room for a last rewrite in place on a full disk.
                f.write(text + "\n" + " " * RESERVE_BYTES + "\n")
                f.flush()
                os.fsync(
                    f.fileno()
                )  # on disk before the rename: a machine that powers off leaves one or the other
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if not is_full(exc):
                raise
            if not _write_in_place(self.path, self.data):
                raise full_error(self.path, len(text) + RESERVE_BYTES, exc) from None
            return
        os.replace(tmp, self.path)

    def record(self, **fields: Any) -> None:
        """Add top-level `fields` (a resumed attempt replaces what the earlier one recorded)."""
        self.data.update(fields)
        self._write()

    def finish(self, status: str, error: str | None = None, **extra: Any) -> None:
        wall = round(time.time() - self.started, 2)
        self.attempt.update(status=status, error=error, wall_time_s=wall)
        self.data.update(
            status=status, error=error, wall_time_s=round(self.earlier_wall_time + wall, 2), **extra
        )
        self._write()


def _write_in_place(path: Path, data: dict[str, Any]) -> bool:
    """Overwrite run.json within its current size (its reserved blanks: no new blocks), on a full disk.

    Not atomic, which is why it is the last resort: without it run.json would say "running" for ever."""
    try:
        size = path.stat().st_size
    except OSError:
        return False
    for text in (json.dumps(data, indent=2), json.dumps(data, separators=(",", ":"))):
        encoded = text.encode()
        if len(encoded) < size:
            break
    else:
        return False
    try:
        with open(path, "r+b") as f:
            f.write(encoded + b" " * (size - len(encoded) - 1) + b"\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        return False
    return True


def read_run_json(path: Path) -> dict[str, Any]:
    """A run.json as a dict; {} when there is none or it cannot be read (killed while writing)."""
    return read_run_json_checked(path)[0]


def read_run_json_checked(path: Path) -> tuple[dict[str, Any], str | None]:
    """(run.json as a dict, None); ({}, None) when there is none; ({}, why) when it cannot be read."""
    if not path.is_file():
        return {}, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {}, f"unreadable {path.name}: {exc}"
    return (data, None) if isinstance(data, dict) else ({}, f"{path.name} is not an object")
