"""One process per run directory: an exclusive `flock` on the directory itself, held until the process ends.

Two processes writing one directory log rows twice and race on the checkpoint's temporary file, so the
second is refused in one line. The lock is the kernel's: it goes with the process however that ends (SIGKILL,
the out-of-memory killer), so a killed run never leaves it stuck; what a killed run leaves is a run.json still
saying "running", which the next start reports as such (`previous_run`) and takes over. Locking the
directory, not a file in it, adds no file to it (a refused or repeated start changes nothing there).

Global rank 0 of a launch alone takes it: every data-parallel rank shares the directory. Only the standard
library is imported: Hydra's callback takes the lock before Hydra writes anything there.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from pathlib import Path

from twinkle_exp.errors import UserError

log = logging.getLogger(__name__)
_held: dict[Path, int] = {}
REQUEUE_WAIT_S = 60  # Slurm's KillWait (30 s by default) and then some  # run directory -> the open descriptor that holds its lock


def launch_rank() -> int:
    """Non-zero for every process of a launch but its first: as Lightning guesses the rank before the trainer
    exists (the first of its variables a launcher set), and any process of a node other than node 0 (nodes
    started by hand share the directory, each with LOCAL_RANK 0: docs/scaling-out.md)."""
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            if int(value) > 0:
                return int(value)
            break
    node = os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", ""))
    return int(node) if node.isdigit() else 0


def _holder(fd: int) -> str:
    """ "process N" from /proc/locks for the lock on the directory `fd` names, where Linux says."""
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                if "FLOCK" in fields and inode in fields:
                    return f"process {fields[fields.index(inode) - 1]}"
    except OSError:
        pass
    return "another process"


def _lock(fd: int) -> None:
    """flock `fd`; a requeued Slurm job waits up to REQUEUE_WAIT_S for its previous process to finish exiting."""
    deadline = time.monotonic() + (REQUEUE_WAIT_S if os.environ.get("SLURM_RESTART_COUNT", "0") != "0" else 0)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def hold(run_dir: Path) -> None:
    """Lock `run_dir` (created if missing) for this process, or refuse: another process runs there.

    A process holds one run directory at a time: a sweep's next job releases the previous job's."""
    run_dir = Path(run_dir).absolute()
    if launch_rank() > 0 or run_dir in _held:
        return
    release()
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _lock(fd)
    except OSError as exc:
        holder = _holder(fd) if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else None
        os.close(fd)
        if holder is None:  # a filesystem without flock: run unguarded rather than not at all
            log.warning(
                "cannot lock %s (%s): a second process started there would not be refused", run_dir, exc
            )
            return
        raise UserError(
            f"{run_dir} is in use: {holder} is running there (one process per run directory); wait for it "
            "to end, stop it, or start in another directory (hydra.run.dir=...)"
        ) from None
    _held[run_dir] = fd


def release() -> None:
    """Give up every run directory this process holds."""
    while _held:
        _, fd = _held.popitem()
        os.close(fd)  # closing the descriptor releases its flock
