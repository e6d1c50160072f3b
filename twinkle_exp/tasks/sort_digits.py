"""Digit sorting: prompt "sort:3142=", answer "1234"."""

from __future__ import annotations

import random
from dataclasses import dataclass

from twinkle_exp.tasks.base import Example, ProceduralTask, check_length_range
from twinkle_exp.tasks.registry import register_task


@register_task
@dataclass(kw_only=True, eq=False)
class SortDigitsTask(ProceduralTask):
    """Sort a string of `min_len`..`max_len` decimal digits ascending (repeats kept: "3113" -> "1133").

    The length is drawn uniformly first, then each digit uniformly.
    """

    name = "sort_digits"

    min_len: int = 3
    max_len: int = 8

    def check(self) -> None:
        check_length_range(self.min_len, self.max_len, "len")

    def num_prompts(self) -> int:
        return sum(10**k for k in range(self.min_len, self.max_len + 1))

    def random_example(self, rng: random.Random) -> Example:
        length = rng.randint(self.min_len, self.max_len)
        digits = "".join(rng.choice("0123456789") for _ in range(length))
        return Example(prompt=f"sort:{digits}=", answer="".join(sorted(digits)))
