"""String reversal: prompt "rev:abc=", answer "cba"."""

from __future__ import annotations

import random
from dataclasses import dataclass

from twinkle_exp.tasks.base import Example, ProceduralTask, check_length_range, check_printable_ascii


@dataclass(kw_only=True, eq=False)
class ReverseTask(ProceduralTask):
    """Reverse a string of `min_len`..`max_len` characters from `alphabet`.

    The prompt is always "rev:" + s + "=", so s is `prompt[4:-1]` whatever characters the alphabet holds.
    The length is drawn uniformly first, then each character uniformly.
    """

    name = "reverse"

    min_len: int = 3
    max_len: int = 8
    alphabet: str = "abcdefgh"

    def check(self) -> None:
        check_length_range(self.min_len, self.max_len, "len")
        check_printable_ascii(self.alphabet, "alphabet")
        if len(set(self.alphabet)) != len(self.alphabet):
            # Repeats would skew the character distribution and the count of distinct prompts.
            raise ValueError(f"alphabet has repeated characters: {self.alphabet!r}")

    def num_prompts(self) -> int:
        return sum(len(self.alphabet) ** k for k in range(self.min_len, self.max_len + 1))

    def random_example(self, rng: random.Random) -> Example:
        length = rng.randint(self.min_len, self.max_len)
        text = "".join(rng.choice(self.alphabet) for _ in range(length))
        return Example(prompt=f"rev:{text}=", answer=text[::-1])
