"""Replace a small file so that a kill at any instant leaves either its old bytes or its new ones, never a mix.

The new bytes go to a temporary file in the same directory (same filesystem: the rename is atomic), which is
fsynced, renamed over the target, and the directory fsynced (the rename itself survives a power cut). A
file that already holds these bytes is not touched at all: no write is the safest write.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

TMP_SUFFIX = ".tmp"  # `<name>.tmp` beside the target: what a kill between write and rename leaves


def replace_bytes(path: Path, content: bytes) -> bool:
    """Make `path` hold `content` atomically; False (and nothing written) when it holds them already."""
    path = Path(path)
    with contextlib.suppress(OSError):
        if path.read_bytes() == content:
            return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        with open(tmp, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)
    return True


def fsync_dir(directory: Path) -> None:
    """Flush a directory's entries (a rename, a new file) to disk; a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory: the rename is still atomic
    finally:
        os.close(fd)
