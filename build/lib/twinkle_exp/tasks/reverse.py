"""String reversal: prompt "rev:abc=", answer "cba"."""

from __future__ import annotations

import random

from twinkle_exp.tasks.base import Example, ProceduralTask, check_length_range, check_printable_ascii


class ReverseTask(ProceduralTask):
    """Reverse a string of `min_len`..`max_len` characters from `alphabet`.

    The prompt is always "rev:" + s + "=", so s is `prompt[4:-1]` whatever characters the alphabet holds.
    The length is drawn uniformly first, then each character uniformly.
    """

    name = "reverse"

    def __init__(
        self,
        min_len: int = 3,
        max_len: int = 8,
        alphabet: str = "abcdefgh",
        seed: int = 0,
        num_validation: int = 128,
    ):
        check_length_range(min_len, max_len, "len")
        check_printable_ascii(alphabet, "alphabet")
        if len(set(alphabet)) != len(alphabet):
            # Repeats would skew the character distribution and the count of distinct prompts.
            raise ValueError(f"alphabet has repeated characters: {alphabet!r}")
        self.min_len = min_len
        self.max_len = max_len
        self.alphabet = alphabet
        super().__init__(seed=seed, num_validation=num_validation)

    def num_prompts(self) -> int:
        return sum(len(self.alphabet) ** k for k in range(self.min_len, self.max_len + 1))

    def random_example(self, rng: random.Random) -> Example:
        length = rng.randint(self.min_len, self.max_len)
        text = "".join(rng.choice(self.alphabet) for _ in range(length))
        return Example(prompt=f"rev:{text}=", answer=text[::-1])
