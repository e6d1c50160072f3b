"""Integer addition: prompt "a+b=" (or `prompt_template` with {a} and {b}), answer str(a+b)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from twinkle_exp.tasks.base import Example, ProceduralTask, check_length_range
from twinkle_exp.tasks.registry import register_task


@register_task
@dataclass(kw_only=True, eq=False)
class AdditionTask(ProceduralTask):
    """Add two non-negative integers of `min_digits`..`max_digits` digits each.

    The digit count of each operand is drawn uniformly first, then the operand uniformly among numbers with
    that many digits, so short sums are as frequent as long ones (uniform operands would be ~90% max-length).
    One-digit numbers include 0. `prompt_template` words the question for an instruction-tuned model
    ("What is {a} + {b}? Reply with just the number."), usually with `chat_template`.
    """

    name = "addition"

    min_digits: int = 1
    max_digits: int = 3
    prompt_template: str = "{a}+{b}="
    chat_template: bool = False
    system_prompt: str | None = None

    def check(self) -> None:
        check_length_range(self.min_digits, self.max_digits, "digits")
        try:
            self.prompt_template.format(a=1, b=2)
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(
                f"prompt_template={self.prompt_template!r}: only the fields {{a}} and {{b}} are known ({e})"
            ) from None
        if "{a}" not in self.prompt_template or "{b}" not in self.prompt_template:
            raise ValueError(f"prompt_template={self.prompt_template!r} must contain both {{a}} and {{b}}")

    def _operand_range(self) -> tuple[int, int]:
        low = 0 if self.min_digits == 1 else 10 ** (self.min_digits - 1)
        return low, 10**self.max_digits - 1

    def num_prompts(self) -> int:
        low, high = self._operand_range()
        return (high - low + 1) ** 2

    def _operand(self, rng: random.Random) -> int:
        digits = rng.randint(self.min_digits, self.max_digits)
        low = 0 if digits == 1 else 10 ** (digits - 1)
        return rng.randint(low, 10**digits - 1)

    def random_example(self, rng: random.Random) -> Example:
        a, b = self._operand(rng), self._operand(rng)
        return Example(prompt=self.prompt_template.format(a=a, b=b), answer=str(a + b))
