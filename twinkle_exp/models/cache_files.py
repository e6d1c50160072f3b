"""Files that several jobs share through a cache directory: one writer at a time, readable by the group.

Used by the warm-start cache and the GGUF conversion cache; both write to a temporary name and rename, so a
reader never sees a half-written entry.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold `<path>.lock` exclusively: parallel jobs of a sweep build one entry, the others wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def readable_by_group(path: Path | str) -> None:
    """Give `path` (a file, or a directory and everything in it) the mode a user's own new files get.

    mkstemp's 0600 and mkdtemp's 0700 would hide a cache entry from the group's other jobs.
    """
    umask = os.umask(0)
    os.umask(umask)
    path = Path(path)
    if path.is_dir():
        os.chmod(path, 0o777 & ~umask)
        for child in path.rglob("*"):
            os.chmod(child, (0o777 if child.is_dir() else 0o666) & ~umask)
    else:
        os.chmod(path, 0o666 & ~umask)
