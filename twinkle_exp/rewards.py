"""Verifiable reward functions and their weighted combination.

Every reward function has one signature:

    fn(prompts: list[str], completions: list[str], answers: list[str]) -> list[float]

with the three lists of equal length N (one entry per completion; a prompt repeats G times for its group),
completions decoded to text without EOS, and one float per completion. Built-ins are plain top-level
functions, or factories returning a picklable callable, so a Hydra `_target_` can name them and Lightning
can ship them to worker processes. A user's own function plugs in the same way.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

RewardFn = Callable[[list[str], list[str], list[str]], list[float]]


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


class NonFiniteRewardError(ValueError):
    """A reward came out NaN or inf (or beyond float32): the trainer skips that rollout's steps."""


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
class RewardFunction:
    """One term of the total reward: `weight * fn(...)`, reported under `name`."""

    name: str
    fn: RewardFn
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"reward function name must be a non-empty string, got {self.name!r}")
        if not callable(self.fn):
            raise ValueError(f"reward function {self.name!r}: fn must be callable, got {self.fn!r}")
        if not isinstance(self.weight, numbers.Real):
            raise ValueError(f"reward function {self.name!r}: weight must be a number, got {self.weight!r}")
        if not math.isfinite(self.weight):
            raise ValueError(f"reward function {self.name!r}: weight must be finite, got {self.weight}")


class RewardSet:
    """A weighted sum of reward functions, each output checked before it can reach the advantages.

    `truncated_max` caps the total reward of a completion cut off at the sampler's budget without EOS (0.0 by
    default: such a completion is never exact, even when its text matches); None scores it like any other.
    """

    def __init__(self, functions: Sequence[RewardFunction], truncated_max: float | None = 0.0) -> None:
        functions = list(functions)
        if not functions:
            raise ValueError("RewardSet needs at least one reward function")
        names = [f.name for f in functions]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"reward function names must be unique, repeated: {duplicates}")
        self.functions = functions
        self.truncated_max = truncated_max

    def __call__(
        self,
        prompts: list[str],
        completions: list[str],
        answers: list[str],
        truncated: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Returns (total `[N]` float32 weighted sum, {name: raw values `[N]` float32}).

        `truncated` `[N]` bool marks completions without EOS; their total is capped at `truncated_max`.
        """
        n = len(completions)
        if len(prompts) != n or len(answers) != n:
            raise ValueError(
                f"prompts, completions and answers must have the same length, got "
                f"{len(prompts)}, {n}, {len(answers)}"
            )
        total = torch.zeros(n, dtype=torch.float64)  # float64 sum, so term order does not change the result
        raw: dict[str, torch.Tensor] = {}
        for rf in self.functions:
            values = _checked(rf.name, rf.fn(list(prompts), list(completions), list(answers)), n)
            raw[rf.name] = values.to(torch.float32)
            total += rf.weight * values
        if truncated is not None and self.truncated_max is not None:
            total = torch.where(truncated.cpu(), total.clamp(max=self.truncated_max), total)
        total32 = total.to(torch.float32)
        if not torch.isfinite(total32).all():
            raise NonFiniteRewardError(
                "total reward overflows float32; check the weights and reward magnitudes"
            )
        return total32, raw


def _checked(name: str, values: object, n: int) -> torch.Tensor:
    """`values` as a float64 tensor `[n]`, or ValueError saying what reward function `name` got wrong."""
    if not isinstance(values, (list, tuple)):
        raise ValueError(
            f"reward function {name!r} must return a list of {n} floats, got {type(values).__name__}"
        )
    if len(values) != n:
        raise ValueError(f"reward function {name!r} returned {len(values)} values for {n} completions")
    for i, v in enumerate(values):
        if not isinstance(v, numbers.Real):
            raise ValueError(f"reward function {name!r}: value {i} is {v!r}, not a number")
        if not math.isfinite(v):
            raise NonFiniteRewardError(f"reward function {name!r}: value {i} is not finite ({v})")
    values_t = torch.tensor([float(v) for v in values], dtype=torch.float64)
    if not torch.isfinite(values_t.to(torch.float32)).all():
        raise NonFiniteRewardError(f"reward function {name!r}: a value is too large for float32")
    return values_t
