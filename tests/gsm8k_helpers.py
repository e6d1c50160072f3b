"""Small files in GSM8K's format (a worked solution ending in `#### <answer>`), written by the tests."""

from __future__ import annotations

import json
import random
from pathlib import Path


def gsm8k_rows(n: int, seed: int = 0) -> list[dict[str, str]]:
    """`n` distinct word problems with their GSM8K-style solutions (ASCII, one line each question)."""
    rng = random.Random(seed)
    rows, seen = [], set()
    while len(rows) < n:
        a, b = rng.randint(1, 60), rng.randint(1, 60)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        question = f"Tom has {a} apples and buys {b} more. How many apples does he have?"
        solution = f"He has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}"
        rows.append({"question": question, "answer": solution})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
