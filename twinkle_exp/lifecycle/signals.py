"""SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 stop a run at the next optimizer-step boundary instead of killing it.

Schedulers send SIGTERM before they kill a job, SLURM sends SIGUSR1 as a pre-emption warning (with
`--signal=USR1@90`), submitit sends SIGUSR2, and a user presses Ctrl-C. Each of them only sets a flag here;
the training step finishes its optimizer step, the trainer writes a checkpoint, and the run exits non-zero
(128 + the signal's number) with `run.json` saying "interrupted"; the warm-start stops after its current
step and is not cached. A second Ctrl-C stops at once.

Signals belong to the process, so this module holds one process-wide state. Only the standard library is
imported, so `cli` can install the handlers before the slow imports (torch, Lightning) begin.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
# The signal SLURM is asked to send before the end of a job (sbatch --signal=USR1@90), as Lightning's
# SLURMEnvironment expects by default: on it, a run under SLURM requeues itself after its checkpoint.
REQUEUE_SIGNAL = signal.SIGUSR1

_received: int | None = None
_previous: dict[int, Any] = {}


def _handle(signum: int, frame: Any) -> None:
    global _received
    if _received is not None:
        if signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: the user does not want to wait for the step
        return
    _received = signum
    log.warning(
        "received %s: finishing the current step (of the warm-start, or of training, which then writes a "
        "checkpoint) (Ctrl-C again: stop now)",
        signal.Signals(signum).name,
    )


def install() -> None:
    """Handle SIGNALS from now on (main thread only: Python delivers signals there); forgets earlier ones."""
    global _received
    _received = None
    for signum in SIGNALS:
        previous = signal.getsignal(signum)
        if previous is not _handle:
            _previous[signum] = previous
        signal.signal(signum, _handle)


def reinstall() -> None:
    """Take the signals back from whoever replaced the handlers (Lightning does, when `fit` starts)."""
    if _previous:
        for signum in SIGNALS:
            signal.signal(signum, _handle)


def restore() -> None:
    """Give the signals back to the handlers that were there before `install`, and forget any received."""
    global _received
    for signum, previous in _previous.items():
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    _previous.clear()
    _received = None


def received() -> int | None:
    """The first signal received since `install`, or None."""
    return _received


def name(signum: int) -> str:
    return signal.Signals(signum).name


def exit_code(signum: int) -> int:
    """What a shell reports for a process ended by `signum` (143 for SIGTERM): non-zero, and says which."""
    return 128 + int(signum)


def hand_over(signum: int) -> None:
    """After the checkpoint, run the handler that was there before ours (submitit's requeue on SIGUSR2).

    Python's own Ctrl-C handler is not called: it would only raise KeyboardInterrupt.
    """
    previous: Callable | Any = _previous.get(signum)
    if callable(previous) and previous is not signal.default_int_handler:
        previous(signum, None)


def slurm_job_id() -> str | None:
    """The id `scontrol requeue` takes: `<array job>_<task>` for an array task, else SLURM_JOB_ID."""
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array_job and task:
        return f"{array_job}_{task}"
    return os.environ.get("SLURM_JOB_ID")


def requeue_on_slurm(signum: int, is_slurm: bool) -> bool:
    """Requeue this SLURM job (the rerun resumes from the checkpoint) when `signum` is SLURM's warning.

    `is_slurm`: Lightning's `SLURMEnvironment.detect()`; call on global rank 0 only. True when requeued.
    """
    job = slurm_job_id()
    if signum != REQUEUE_SIGNAL or not is_slurm or not job:
        return False
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("could not requeue SLURM job %s: %s", job, exc)
        return False
    if result.returncode != 0:
        log.warning("scontrol requeue %s failed (%d): %s", job, result.returncode, result.stderr.strip())
        return False
    log.warning("requeued SLURM job %s: it will resume from the checkpoint", job)
    return True
