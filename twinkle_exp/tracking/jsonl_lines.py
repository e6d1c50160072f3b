"""The run directory's append-only JSON-lines files (samples.jsonl, items.jsonl): whole lines appended in
one write and fsynced, so a kill tears at most the last line, which the reader skips and says so. No torch
or lightning here: the report reads these files through their modules."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def append_lines(path: Path, lines: list[str]) -> None:
    """Append `lines` (each ending in a newline) in one write, flushed and fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(lines))
        f.flush()
        os.fsync(f.fileno())


def size_of(path: Path) -> int:
    """The file's size in bytes; 0 when there is none yet."""
    return path.stat().st_size if path.is_file() else 0


def read_rows(path: Path, name: str, well_formed: Callable[[Any], bool]) -> tuple[list[Any], list[str]]:
    """(the rows of `path` that are `well_formed`, in file order; problems): ([], []) without a file. A line
    that does not parse or is not well formed (a kill tore it) is skipped, and said, under `name`."""
    if not Path(path).is_file():
        return [], []
    rows, bad = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                ok = well_formed(row)
            except (json.JSONDecodeError, KeyError, TypeError):
                ok = False
            if ok:
                rows.append(row)
            else:
                bad.append(number)
    if not bad:
        return rows, []
    which = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
    return rows, [
        f"{name}: skipped {len(bad)} unreadable line(s) (line {which}; a run killed while writing tears its "
        "last line)"
    ]
