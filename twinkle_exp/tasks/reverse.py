"""String reversal: prompt "rev:abc=", answer "cba"."""

from __future__ import annotations

import random
from dataclasses import dataclass

from twinkle_exp.tasks.base import Example, ProceduralTask, check_length_range, check_printable_ascii
from twinkle_exp.tasks.registry import register_task


@register_task
@dataclass(kw_only=True, eq=False)
class ReverseTask(ProceduralTask):
    """Reverse a string of `min_len`..`max_len` characters from `alphabet`.

    The prompt is "rev:" + s + "=". With `pad` (one character outside the alphabet) s is left-padded with it
    to `max_len` characters ("rev:___abc=" for max_len 6), so that every prompt has the same length and the
    answer's k-th character always sits at the same distance before "=", whatever the string's length.
    The length is drawn uniformly first, then each character uniformly.
    """

    name = "reverse"

    min_len: int = 3
    max_len: int = 6
    alphabet: str = "abcdefgh"
    pad: str = ""

    def check(self) -> None:
        check_length_range(self.min_len, self.max_len, "len")
        check_printable_ascii(self.alphabet, "alphabet")
        if len(set(self.alphabet)) != len(self.alphabet):
            # Repeats would skew the character distribution and the count of distinct prompts.
            raise ValueError(f"alphabet has repeated characters: {self.alphabet!r}")
        if self.pad:
            check_printable_ascii(self.pad, "pad")
            if len(self.pad) != 1 or self.pad in self.alphabet:
                raise ValueError(f"pad must be one character outside the alphabet, got {self.pad!r}")

    def num_prompts(self) -> int:
        return sum(len(self.alphabet) ** k for k in range(self.min_len, self.max_len + 1))

    def random_example(self, rng: random.Random) -> Example:
        length = rng.randint(self.min_len, self.max_len)
        text = "".join(rng.choice(self.alphabet) for _ in range(length))
        shown = text.rjust(self.max_len, self.pad) if self.pad else text
        return Example(prompt=f"rev:{shown}=", answer=text[::-1])
