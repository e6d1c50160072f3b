"""Reversal with a scratchpad: free text, a separator, then the answer; only the answer is scored.

Prompt "pad:abc=", a correct completion "....|cba" (any filler before the last "|"); with `answer_first` the
free text comes after the answer instead, "cba|....", so that how long it is cannot change where the answer
sits (the built-in policy's positions are absolute: a longer filler before the answer makes the answer harder
to place, and the reward then prefers short completions after all). The completion's length
is free of the reward, which is the condition the length-bias claims need (Liu et al. 2025, arXiv
2503.20783: under a per-sequence 1/|o| normaliser incorrect completions grow): nothing about the filler is
rewarded or penalised, so how long completions become is decided by the loss's normaliser alone. The
warm-start imitates completions with filler of uniformly drawn length, so a rollout's group starts with
varied lengths for the loss to act on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from twinkle_exp.tasks.base import Example, ProceduralTask, check_length_range, check_printable_ascii
from twinkle_exp.tasks.registry import register_task


@register_task
@dataclass(kw_only=True, eq=False)
class ScratchpadTask(ProceduralTask):
    """Reverse `min_len`..`max_len` characters of `alphabet`, answering after `separator` (or before it).

    The warm-start's demonstrations put `min_filler`..`max_filler` characters of `filler` (each drawn
    uniformly) before the separator (after it with `answer_first`). Validation and the `scratchpad` reward
    compare what follows the last separator (precedes the first) with the answer; a completion without a
    separator has no answer.
    """

    name = "scratchpad"

    min_len: int = 3
    max_len: int = 5
    alphabet: str = "abcdefgh"
    filler: str = "."
    min_filler: int = 0
    max_filler: int = 8
    separator: str = "|"
    answer_first: bool = False

    def check(self) -> None:
        check_length_range(self.min_len, self.max_len, "len")
        if self.min_filler < 0 or self.max_filler < self.min_filler:
            raise ValueError(
                f"need 0 <= min_filler <= max_filler, got min_filler={self.min_filler}, "
                f"max_filler={self.max_filler}"
            )
        for what in ("alphabet", "filler", "separator"):
            check_printable_ascii(getattr(self, what), what)
        if len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError(f"alphabet has repeated characters: {self.alphabet!r}")
        if len(self.separator) != 1:
            raise ValueError(f"separator must be one character, got {self.separator!r}")
        if self.separator in self.alphabet + self.filler:
            # The answer is what follows the last separator: it must not occur inside the filler or answer.
            raise ValueError(f"separator {self.separator!r} also occurs in the alphabet or the filler")

    def num_prompts(self) -> int:
        return sum(len(self.alphabet) ** k for k in range(self.min_len, self.max_len + 1))

    def random_example(self, rng: random.Random) -> Example:
        length = rng.randint(self.min_len, self.max_len)
        text = "".join(rng.choice(self.alphabet) for _ in range(length))
        pad = "".join(rng.choice(self.filler) for _ in range(rng.randint(self.min_filler, self.max_filler)))
        answer = text[::-1]
        shown = answer + self.separator + pad if self.answer_first else pad + self.separator + answer
        return Example(prompt=f"pad:{text}=", answer=answer, demonstration=shown)

    def completion_answer(self, completion: str) -> str:
        return answer_part(completion, self.separator, self.answer_first)


def answer_part(completion: str, separator: str, answer_first: bool) -> str:
    """The answer of a scratchpad completion: what follows the last separator (precedes the first with
    `answer_first`); "" when there is no separator."""
    if answer_first:
        head, found, _ = completion.partition(separator)
        return head if found else ""
    _, found, tail = completion.rpartition(separator)
    return tail if found else ""
