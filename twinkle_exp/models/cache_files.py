"""Files that several jobs share through a cache directory: one writer at a time, readable by the group.

Used by the warm-start cache and the GGUF conversion cache; both write to a temporary name and rename, so a
reader never sees a half-written entry. A sha256 digest beside a file (`replace_with_digest`, `digest_problem`)
tells a file whose bytes changed after it was written (a disk or copy error) from an intact one; checkpoints
use it too.
"""

from __future__ import annotations

import fcntl
import hashlib
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


# --- digests: a file's bytes checked against what was written --------------------------------------------
DIGEST_SUFFIX = ".sha256"


def sha256_of(path: Path) -> str:
    """sha256 of a file's bytes; of a directory, of every file's relative name and bytes in sorted order."""
    path = Path(path)
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode() + b"\0")
        with open(file, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def digest_file(path: Path) -> Path:
    """`<path>.sha256`, beside the file it describes."""
    return Path(path).with_name(Path(path).name + DIGEST_SUFFIX)


def read_digests(path: Path) -> list[str] | None:
    """The digests `<path>.sha256` accepts for `path` (`sha256sum` lines); None when there is no such file."""
    try:
        text = digest_file(path).read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return []  # unreadable: nothing matches it
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def _write_digests(path: Path, digests: list[str]) -> None:
    target = digest_file(path)
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "w") as f:
        f.write("".join(f"{d}  {Path(path).name}\n" for d in digests))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def digest_problem(path: Path) -> str | None:
    """Why `path` does not match its digest file, or None (it matches, or there is no digest file)."""
    accepted = read_digests(path)
    if accepted is None:
        return None
    actual = sha256_of(path)
    if actual in accepted:
        return None
    said = ", ".join(d[:16] for d in accepted) or "nothing readable"
    return f"its sha256 is {actual[:16]}..., {digest_file(path).name} says {said}"


def replace_with_digest(tmp: Path, path: Path) -> str:
    """Rename `tmp` onto `path` and leave `<path>.sha256` naming its bytes; returns the new digest.

    The two renames cannot be one, so the digest file first accepts both the file being replaced and the new
    one, then the rename, then only the new one: a crash at any moment leaves a `path` its digest file
    accepts, and a `path` it does not accept has changed since it was written."""
    path = Path(path)
    new = sha256_of(tmp)
    if path.exists():
        previous = read_digests(path)
        if previous is None:  # written before digests: what it holds now is what it is
            previous = [sha256_of(path)]
        _write_digests(path, [new, *(d for d in previous if d != new)])
    else:
        _write_digests(path, [new])
    os.replace(tmp, path)
    _write_digests(path, [new])
    return new
