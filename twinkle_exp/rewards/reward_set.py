"""The weighted sum of reward functions, each output checked before it can reach the advantages.

Every reward function has one signature:

    fn(prompts: list[str], completions: list[str], answers: list[str]) -> list[float]

with the three lists of equal length N (one entry per completion; a prompt repeats G times for its group),
completions decoded to text without EOS, and one float per completion. Built-ins are plain top-level
functions, or factories returning a picklable callable, so a Hydra `_target_` can name them and Lightning
can ship them to worker processes. A user's own function plugs in the same way.

A function whose values are a verdict (1.0 correct, 0.0 not: the math checker) says so with a true
`is_verdict` attribute; the held-out accuracy is then its verdict instead of exact string match.

A function may also report counts about its last call (the math checker: answers that did not parse) as a
`last_metrics` attribute, `{metric key: value}`; `RewardSet.last_metrics` gathers them after each call.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from twinkle_exp.errors import UserError
from twinkle_exp.rewards.overlong import OverlongShaping

RewardFn = Callable[[list[str], list[str], list[str]], list[float]]
OVERLONG_TERM = "overlong_penalty"  # the overlong penalty's column beside the functions' (train/rewards/...)


class NonFiniteRewardError(UserError):
    """A reward came out NaN or inf (or beyond float32): the trainer skips that rollout's steps.

    A `UserError` (the reward function is the user's), so that anywhere it is not caught it still ends the
    run with one line and exit 2.
    """


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
    `overlong` (None: off) then adds DAPO's length penalty (`rewards.overlong`), reported as its own term.
    """

    def __init__(
        self,
        functions: Sequence[RewardFunction],
        truncated_max: float | None = 0.0,
        overlong: OverlongShaping | None = None,
    ) -> None:
        functions = list(functions)
        if not functions:
            raise ValueError("RewardSet needs at least one reward function")
        names = [f.name for f in functions]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"reward function names must be unique, repeated: {duplicates}")
        self.functions = functions
        self.truncated_max = truncated_max
        self.overlong = overlong
        # What the functions reported about the latest call (summed over functions sharing a key); each
        # call replaces it, so read it right after the call it belongs to.
        self.last_metrics: dict[str, float] = {}

    def columns(self) -> list[str]:
        """The names of the raw values a call returns: each function's, then the overlong penalty's."""
        return [f.name for f in self.functions] + ([OVERLONG_TERM] if self.overlong is not None else [])

    def verdict(self) -> RewardFunction | None:
        """The first function that marks itself `is_verdict` (1.0: correct), or None when none does."""
        return next((f for f in self.functions if getattr(f.fn, "is_verdict", False)), None)

    def __call__(
        self,
        prompts: list[str],
        completions: list[str],
        answers: list[str],
        truncated: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Returns (total `[N]` float32 weighted sum, {name: raw values `[N]` float32}).

        `truncated` `[N]` bool marks completions without EOS; their total is capped at `truncated_max`.
        `lengths` `[N]` completion tokens: the overlong penalty's input (required when it is on).
        """
        n = len(completions)
        if len(prompts) != n or len(answers) != n:
            raise ValueError(
                f"prompts, completions and answers must have the same length, got "
                f"{len(prompts)}, {n}, {len(answers)}"
            )
        total = torch.zeros(n, dtype=torch.float64)  # float64 sum, so term order does not change the result
        raw: dict[str, torch.Tensor] = {}
        reported: dict[str, float] = {}
        for rf in self.functions:
            try:
                returned = rf.fn(list(prompts), list(completions), list(answers))
            except Exception as exc:
                raise UserError(
                    f"reward function {rf.name!r} raised {type(exc).__name__}: {exc} "
                    f"(scoring {n} completions; the first: prompt {prompts[0]!r}, completion {completions[0]!r})"
                ) from exc
            values = _checked(rf.name, returned, n)
            raw[rf.name] = values.to(torch.float32)
            total += rf.weight * values
            for key, value in (getattr(rf.fn, "last_metrics", None) or {}).items():
                reported[key] = reported.get(key, 0.0) + float(value)
        self.last_metrics = reported
        if truncated is not None and self.truncated_max is not None:
            total = torch.where(truncated.cpu(), total.clamp(max=self.truncated_max), total)
        if self.overlong is not None:
            if lengths is None:
                raise ValueError("the overlong penalty needs the completions' lengths")
            penalty = self.overlong(lengths.cpu())
            raw[OVERLONG_TERM] = penalty.to(torch.float32)
            total = total + penalty
        total32 = total.to(torch.float32)
        if not torch.isfinite(total32).all():
            raise NonFiniteRewardError(
                "total reward overflows float32; check the weights and reward magnitudes"
            )
        return total32, raw


def _checked(name: str, values: object, n: int) -> torch.Tensor:
    """`values` as a float64 tensor `[n]`, or UserError saying what reward function `name` got wrong."""
    if not isinstance(values, (list, tuple)):
        raise UserError(
            f"reward function {name!r} must return a list of {n} floats, got {type(values).__name__}"
        )
    if len(values) != n:
        raise UserError(f"reward function {name!r} returned {len(values)} values for {n} completions")
    for i, v in enumerate(values):
        if not isinstance(v, numbers.Real):
            raise UserError(f"reward function {name!r}: value {i} is {v!r}, not a number")
        if not math.isfinite(v):
            raise NonFiniteRewardError(f"reward function {name!r}: value {i} is not finite ({v})")
    values_t = torch.tensor([float(v) for v in values], dtype=torch.float64)
    if not torch.isfinite(values_t.to(torch.float32)).all():
        raise NonFiniteRewardError(f"reward function {name!r}: a value is too large for float32")
    return values_t


def build_rewards(
    functions: Mapping[str, Any], truncated_max: float | None, overlong: OverlongShaping | None = None
) -> RewardSet:
    """The `reward` config group's terms (`{name: term}`, each with a Hydra node `fn` (`_target_`) and a
    `weight`), and its `truncated_max`. Takes the group's fields, not its schema: rewards/ imports no config."""
    from hydra.utils import instantiate

    terms = []
    for name, term in functions.items():
        try:
            fn = instantiate(term.fn)
        except Exception as exc:
            cause = exc.__cause__ or exc
            raise UserError(
                f"reward.functions.{name}.fn: cannot build {term.fn.get('_target_')!r}: {cause} "
                f"(a plain function needs `_partial_: true`)"
            ) from exc
        if not callable(fn):
            raise UserError(
                f"reward.functions.{name}.fn: {term.fn.get('_target_')!r} gave {fn!r}, not a function "
                f"fn(prompts, completions, answers) (a plain function needs `_partial_: true`)"
            )
        terms.append(RewardFunction(name=str(name), fn=fn, weight=term.weight))
    if OVERLONG_TERM in functions and overlong is not None:
        raise UserError(f"reward.functions.{OVERLONG_TERM}: that name is the overlong penalty's; rename it")
    return RewardSet(terms, truncated_max=truncated_max, overlong=overlong)
