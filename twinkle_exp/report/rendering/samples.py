"""The report's completions: for each variant, a few that its first seed's run wrote at the start and at the
end of training, from the run's samples.jsonl (the page escapes them: a completion is arbitrary text)."""

from __future__ import annotations

from typing import Any

from twinkle_exp.summary.diagnostics.quotes import shown
from twinkle_exp.tracking.samples_file import SAMPLES_JSONL

from ..statistics.aggregate import VariantStats

SAMPLE_HEADERS = [
    "variant",
    "when",
    "step",
    "prompt",
    "completion",
    "answer",
    "reward",
    "advantage",
    "tokens",
]
PER_END = 2  # completions shown from the first and from the last rollout of a run
PROMPT_CHARS = 80  # prompts are cut shorter than completions: the completion is what is read


def first_and_last(samples: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """PER_END rows of different prompts from the file's first rollout and from its last one ([] at the
    end for a file of one rollout)."""
    rollouts = [row.get("rollout") for row in samples]
    if not rollouts:
        return [], []
    first, last = _of_rollout(samples, rollouts[0]), _of_rollout(samples, rollouts[-1])
    return first, ([] if rollouts[-1] == rollouts[0] else last)


def _of_rollout(samples: list[dict[str, Any]], rollout: Any) -> list[dict]:
    """The rollout's first PER_END rows, one per prompt (a group's first completion, before the extra
    cut-off or prompt-repeating one of the same group)."""
    chosen, prompts = [], set()
    for row in samples:
        if row.get("rollout") == rollout and row.get("prompt") not in prompts:
            chosen.append(row)
            prompts.add(row.get("prompt"))
    return chosen[:PER_END]


def sample_rows(stats: list[VariantStats], names: dict[str, str]) -> list[list[str]]:
    """SAMPLE_HEADERS rows: per variant, its lowest seed's run that kept samples."""
    rows = []
    for s in stats:
        runs = sorted((r for r in s.runs if r.samples), key=lambda r: (r.seed is None, r.seed or 0, r.name))
        if not runs:
            continue
        run = runs[0]
        first, last = first_and_last(run.samples)
        label = f"{names.get(s.label) or s.label} (seed {run.seed})"
        for when, chosen in (("start", first), ("end", last)):
            rows += [_row(label, when, row) for row in chosen]
    return rows


def sample_note(rows: list[list[str]]) -> str:
    if not rows:
        return f"No run kept completions ({SAMPLES_JSONL} in its directory; trainer.samples_file_rows=0 turns it off)."
    return (
        f"From each variant's first seed, its {SAMPLES_JSONL}: the first completions of the first and of the "
        "last rollout it kept (⏎ = a new line, … = cut here; the file holds the whole text, with every "
        "reward function's value)."
    )


def _row(label: str, when: str, row: dict[str, Any]) -> list[str]:
    flags = " (cut off)" if row.get("truncated") else ""
    return [
        label,
        when,
        str(row.get("step", "")),
        shown(row.get("prompt", ""), PROMPT_CHARS),
        (shown(row.get("completion", "")) or "(empty)") + flags,
        shown(row.get("answer", ""), PROMPT_CHARS),
        _number(row.get("reward")),
        _number(row.get("advantage")),
        str(row.get("length", "")),
    ]


def _number(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else "–"
