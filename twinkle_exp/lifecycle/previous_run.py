"""A run directory that holds an ended run: continued by the same experiment from its checkpoint, else refused
or, with `previous_run=move_aside`, moved to a sibling first; never overwritten.

An ended run is one whose run.json says finished, failed or interrupted. Starting in its directory anything
but its continuation (no checkpoint to continue from: `trainer.save_checkpoint=false`, `debug=fast`; another
loss, task, policy or seed; `resume=null`; a checkpoint whose bytes changed) would replace its metrics.csv
and run.json, so it is refused in one line naming the directory, what it holds and the two ways out. A
run.json that still says "running" is a killed process's (this process holds the directory's lock,
`run_lock`): it restarts, from its checkpoint if it has one, as before. An interrupted or failed run that
never trained (stopped at optimizer step 0, without a checkpoint) holds nothing to lose and starts again.

Moving aside copies every file of the old run into `<dir>.previous-<time>/` (checkpoints are renamed), then
removes them here, run.json last; the log this start already appended to gets its old content there from
the start's snapshot (`run_dir_guard`) and keeps only this start's part here. The old `.hydra/` goes too:
this start writes its own when it begins (`tracking.hydra_record`).
"""

from __future__ import annotations

import contextlib
import csv
import logging
import os
import time
from pathlib import Path
from typing import Any

from twinkle_exp.errors import UserError
from twinkle_exp.lifecycle import resume, run_lock
from twinkle_exp.lifecycle.checkpoints import last_checkpoint
from twinkle_exp.lifecycle.run_dir_guard import Snapshot
from twinkle_exp.tracking.atomic_file import fsync_dir
from twinkle_exp.tracking.run_json import METRICS_CSV, MOVED_ASIDE, RUN_JSON, read_run_json

log = logging.getLogger(__name__)
REFUSE, MOVE_ASIDE = "refuse", "move_aside"  # `previous_run=` (config/schema.py)
ENDED = ("finished", "failed", "interrupted")


def start_in(
    run_dir: Path, resume_setting: str | None, setting: str, config: dict[str, Any], before: Snapshot
) -> tuple[resume.Start, Snapshot]:
    """Where the run in `run_dir` starts, and the snapshot a refused start restores (a fresh one once the old
    run was moved aside); refuses a start that would overwrite an ended run."""
    previous = read_run_json(run_dir / RUN_JSON) if run_lock.launch_rank() == 0 else {}
    if previous.get("status") == "running":
        log.warning(
            "%s says the run there is running, but no process holds the directory: it was killed (SIGKILL, "
            "out of memory, a machine that stopped); this start takes it over",
            run_dir / RUN_JSON,
        )
    try:
        start = resume.find_start(resume_setting, run_dir)
        why = _why_not_continued(run_dir, previous, start, config)
    except UserError as exc:  # about the directory's own checkpoint (resume=null, changed bytes)
        if setting != MOVE_ASIDE or resume_setting not in ("auto", None) or not previous:
            raise
        why = str(exc)
    if why is None:
        return start, before
    if setting != MOVE_ASIDE:
        aside = f"{run_dir.name}.previous-<time>"
        raise UserError(
            f"resume refused: {run_dir} holds {_described(run_dir, previous)}, which this start would "
            f"overwrite: {why}. "
            f"Start in a new directory (hydra.run.dir=..., hydra.sweep.dir=... for a sweep), or pass "
            f"previous_run={MOVE_ASIDE} to move the old run to {aside} first"
        )
    moved = move_aside(run_dir, before)
    log.warning("moved the %s run of %s to %s (previous_run=%s)", previous["status"], run_dir, moved, setting)
    return resume.find_start(resume_setting, run_dir), Snapshot(run_dir)


def _why_not_continued(
    run_dir: Path, previous: dict[str, Any], start: resume.Start, config: dict[str, Any]
) -> str | None:
    """Why this start is not the continuation of the ended run in `run_dir`; None when it is (or none is)."""
    if previous.get("status") not in ENDED:
        return None
    own = last_checkpoint(run_dir)
    if start.checkpoint is not None and own.exists() and os.path.samefile(start.checkpoint, own):
        differences = resume.identity_differences(start, config)
        return f"its checkpoint belongs to another experiment ({differences})" if differences else None
    if start.checkpoint is not None:
        return f"this start continues another run's checkpoint ({start.checkpoint})"
    if previous["status"] != "finished" and held_steps(run_dir, previous) == 0:
        return None  # stopped before its first optimizer step: nothing to lose
    if own.exists():
        return "resume=null starts afresh"
    return "it kept no checkpoint to continue from (trainer.save_checkpoint=false, or debug=fast)"


def held_steps(run_dir: Path, previous: dict[str, Any]) -> int:
    """The optimizer steps the ended run in `run_dir` recorded: in run.json, or in metrics.csv's rows."""
    steps = [previous.get("step"), (previous.get("final") or {}).get("steps")]
    try:
        with open(run_dir / METRICS_CSV, newline="") as f:
            steps += [row.get("step") for row in csv.DictReader(f)]
    except (OSError, csv.Error):
        pass
    found = [
        int(float(s)) for s in steps if isinstance(s, int | float) or (isinstance(s, str) and _number(s))
    ]
    return max(found, default=0)


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _described(run_dir: Path, previous: dict[str, Any]) -> str:
    final = previous.get("final") or {}
    parts = [f"loss {previous.get('loss')}", f"seed {previous.get('seed')}"]
    parts.append(f"{held_steps(run_dir, previous)} optimizer steps")
    if isinstance(final.get("accuracy_after"), int | float):
        parts.append(f"accuracy {final['accuracy_after']:.3f}")
    return f"a {previous['status']} run ({', '.join(parts)})"


def move_aside(run_dir: Path, before: Snapshot) -> Path:
    """Move the run `before` saw in `run_dir` to a new sibling `<dir>.previous-<time>`; returns the sibling."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = run_dir.with_name(f"{run_dir.name}{MOVED_ASIDE}{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = run_dir.with_name(f"{run_dir.name}{MOVED_ASIDE}{stamp}-{n}")
    aside.mkdir()
    for path, target in before.links.items():
        dest = aside / path.relative_to(run_dir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            os.rename(path, dest)
        else:
            dest.symlink_to(target)
    # Every file is in the sibling before any leaves `run_dir`: a kill during the move loses nothing (the next
    # start moves what is left to another sibling).
    for path, (content, mtime_ns) in before.files.items():
        dest = aside / path.relative_to(run_dir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if content is None:  # large (a checkpoint): nothing of this start's, renamed
            if path.exists():
                os.rename(path, dest)
            continue
        dest.write_bytes(content)
        os.utime(dest, ns=(mtime_ns, mtime_ns))
    fsync_dir(aside)
    # run.json leaves last: until then the directory still says it holds the ended run.
    for path, (content, _) in sorted(before.files.items(), key=lambda item: item[0].name == RUN_JSON):
        if content is None or not path.is_file():
            continue
        now = path.read_bytes()
        if now == content and path.suffix != ".log":
            path.unlink()
        elif now.startswith(content):  # the log this start appends to: its own lines stay, in the same file
            with open(path, "r+b") as f:
                f.write(now[len(content) :])
                f.truncate()
    for path in sorted(before.dirs, key=lambda p: len(p.parts), reverse=True):
        (aside / path.relative_to(run_dir)).mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            path.rmdir()  # emptied, unless this start wrote there
    return aside
