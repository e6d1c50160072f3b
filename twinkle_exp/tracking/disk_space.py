"""A disk that fills up, told in one line: which file could not be written, how many bytes it needed, and how
many were free there.

The writers of a run's files (checkpoints, metrics.csv, run.json, the warm-start cache) turn the operating
system's "No space left on device" (or a quota, or a file-size limit) into a `DiskFullError`, a `UserError`:
the CLI prints its line, run.json records it ("failed" once training started), and the file being replaced
keeps its previous version (every one is written under a temporary name, which is removed).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from twinkle_exp.errors import UserError

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class DiskFullError(UserError):
    """A file of the run could not be written for want of space; the message names it and the bytes."""


def is_full(exc: BaseException) -> bool:
    """Whether `exc` (or what it was raised from) is the operating system saying there is no room."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the filesystem holding `path` (None if unknown)."""
    for where in [Path(path), *Path(path).parents]:
        if where.exists():
            try:
                st = os.statvfs(where)
            except OSError:
                return None
            return st.f_bavail * st.f_frsize
    return None


def serialized_size(obj: Any) -> int:
    """Bytes `torch.save(obj)` writes, counted without writing them."""
    import torch

    class _Counter:
        n = 0

        def write(self, data: bytes) -> int:
            self.n += len(data)
            return len(data)

        def flush(self) -> None:
            pass

    counter = _Counter()
    torch.save(obj, counter)
    return counter.n


def full_error(path: Path, needed: int | None, exc: BaseException) -> DiskFullError:
    """The one-line error for `exc`, a failed write of `needed` bytes (None: unknown) to `path`."""
    free = free_bytes(path)
    why = os.strerror(exc.errno) if isinstance(exc, OSError) and exc.errno else str(exc)
    size = f"needed {needed} bytes" if needed is not None else "needed more room"
    room = f", {free} free there" if free is not None else ""
    return DiskFullError(
        f"could not write {path}: {why} ({size}{room}); free some space (or move the run directory to a "
        "larger disk) and run the same command again"
    )
