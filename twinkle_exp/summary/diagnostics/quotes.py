"""Completions quoted by the checks about completions, from the run's samples.jsonl: the latest rows that
show what the check found (cut off, or restating the prompt), so the reader sees the text, not only a ratio."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# diagnostic -> the samples.jsonl flag of the completions it is about
QUOTED_FLAG = {"truncated_reward_rise": "truncated", "repeated_prompt_reward_rise": "repeats_prompt"}
MAX_QUOTES = 2
MAX_CHARS = 240  # of one quoted completion; the file holds the whole text


def shown(text: Any, limit: int = MAX_CHARS) -> str:
    """`text` on one line, newlines as ⏎ and backticks as ' (the report marks code with them), cut to
    `limit` characters with … when longer."""
    flat = str(text).replace("\r", "").replace("\n", "⏎").replace("`", "'")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def quotes_for(diagnostic: str, samples: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """Up to MAX_QUOTES of the latest completions flagged for `diagnostic`, as 'step 12: "…" (reward 0.5)';
    () for a diagnostic that is not about completions or a run without such rows."""
    flag = QUOTED_FLAG.get(diagnostic)
    if flag is None:
        return ()
    flagged = [row for row in samples if row.get(flag) is True]
    return tuple(_quote(row) for row in flagged[-MAX_QUOTES:])


def _quote(row: dict[str, Any]) -> str:
    reward = row.get("reward")
    said = f" (reward {reward:.3g})" if isinstance(reward, (int, float)) else ""
    return f'step {row.get("step", "?")}: "{shown(row.get("completion", ""))}"{said}'
