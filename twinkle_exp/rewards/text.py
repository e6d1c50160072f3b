"""Reward functions on the completion's text: exact match, partial credit, length penalty, a format check."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


def exact_match(prompts: list[str], completions: list[str], answers: list[str]) -> list[float]:
    """1.0 where the completion equals the answer up to surrounding whitespace, else 0.0."""
    return [1.0 if c.strip() == a.strip() else 0.0 for c, a in zip(completions, answers, strict=True)]


def partial_credit(prompts: list[str], completions: list[str], answers: list[str]) -> list[float]:
    """Fraction of positions right: (# i with c[i] == a[i]) / max(len(c), len(a)), in [0, 1].

    Both strings are stripped first, as in `exact_match`. Dividing by the longer length (not the answer's)
    means padding a right prefix with extra characters lowers the reward, so the policy cannot farm credit
    with over-long completions; 1.0 only for an exact match. Two empty strings count as a match (1.0).
    """
    out = []
    for completion, answer in zip(completions, answers, strict=True):
        c, a = completion.strip(), answer.strip()
        longest = max(len(c), len(a))
        out.append(1.0 if longest == 0 else sum(x == y for x, y in zip(c, a, strict=False)) / longest)
    return out


@dataclass(frozen=True)
class LengthPenalty:
    """Penalty in [-1, 0] for characters beyond the answer's length (stripped, as in `exact_match`).

    extra = max(0, len(completion) - len(answer) - max_extra); reward = -min(1, penalty * extra / len(answer))
    (len(answer) taken as at least 1). With penalty=1 a completion twice the answer's length earns -1. It
    is scaled by the answer's length so that the same relative rambling costs the same on short and long
    answers. Completions at or under the allowed length get exactly 0, so this never rewards anything.
    """

    max_extra: int = 0
    penalty: float = 1.0

    def __post_init__(self) -> None:
        if self.max_extra < 0:
            raise ValueError(f"max_extra must be >= 0, got {self.max_extra}")
        if not (math.isfinite(self.penalty) and self.penalty >= 0):
            raise ValueError(f"penalty must be finite and >= 0, got {self.penalty}")

    def __call__(self, prompts: list[str], completions: list[str], answers: list[str]) -> list[float]:
        out = []
        for completion, answer in zip(completions, answers, strict=True):
            c, a = completion.strip(), answer.strip()
            extra = max(0, len(c) - len(a) - self.max_extra)
            out.append(-min(1.0, self.penalty * extra / max(len(a), 1)))
        return out


def length_penalty(max_extra: int = 0, penalty: float = 1.0) -> LengthPenalty:
    """Factory for `LengthPenalty` (a Hydra `_target_` with keyword arguments)."""
    return LengthPenalty(max_extra=max_extra, penalty=penalty)


@dataclass(frozen=True)
class FormatReward:
    """1.0 where the completion contains a match of `pattern` (a regex; `.` also matches newlines), else 0.0.

    A shaping term to combine with a correctness reward, e.g. `<answer>...</answer>` present.
    """

    pattern: str = r"<answer>.+?</answer>"

    def __post_init__(self) -> None:
        try:
            re.compile(self.pattern)
        except re.error as e:
            raise ValueError(
                f"format reward: pattern {self.pattern!r} is not a regular expression ({e})"
            ) from None

    def __call__(self, prompts: list[str], completions: list[str], answers: list[str]) -> list[float]:
        regex = re.compile(self.pattern, re.DOTALL)
        return [1.0 if regex.search(c) else 0.0 for c in completions]


def format_reward(pattern: str = r"<answer>.+?</answer>") -> FormatReward:
    """Factory for `FormatReward` (a Hydra `_target_` with keyword arguments)."""
    return FormatReward(pattern=pattern)


@dataclass(frozen=True)
class AnswerAfterSeparator:
    """1.0 where the text after the completion's last `separator` (before its first, with `answer_first`)
    equals the answer (stripped), else 0.0.

    The scratchpad task's reward: the text on the other side of the separator is free, neither rewarded nor
    penalised; a completion without the separator has no answer and scores 0.
    """

    separator: str = "|"
    answer_first: bool = False

    def __post_init__(self) -> None:
        if not self.separator:
            raise ValueError("answer_after_separator: separator must be non-empty")

    def __call__(self, prompts: list[str], completions: list[str], answers: list[str]) -> list[float]:
        out = []
        for completion, answer in zip(completions, answers, strict=True):
            if self.answer_first:
                part, found, _ = completion.partition(self.separator)
            else:
                _, found, part = completion.rpartition(self.separator)
            out.append(1.0 if found and part.strip() == answer.strip() else 0.0)
        return out


def answer_after_separator(separator: str = "|", answer_first: bool = False) -> AnswerAfterSeparator:
    """Factory for `AnswerAfterSeparator` (a Hydra `_target_` with keyword arguments)."""
    return AnswerAfterSeparator(separator=separator, answer_first=answer_first)
