"""`reward=math`: is the completion's final answer mathematically equal to the gold answer (math-verify)?"""

from __future__ import annotations

import re

from twinkle_exp import metric_names as M
from twinkle_exp.verifier import math_check
from twinkle_exp.verifier.pool import TimeoutPool


class MathReward:
    """1.0 where math-verify finds the completion's answer equal to the gold answer, else 0.0.

    Each check (parse the gold answer, parse the completion, compare) runs in a worker process with a
    limit of `timeout_s` seconds; a check that ignores it (stuck in C) loses its worker at twice that plus a
    second. Both score 0, so a pathological completion costs at most that much time and never the run.
    With `answer_pattern` (a regex with one group, e.g. `<answer>(.*?)</answer>`) only the group of its last
    match is checked. After each call `last_metrics` holds the number of completions with no parsable
    answer and of checks that timed out; a gold answer that does not parse is a ValueError naming it.

    A numeric gold answer is compared with the number the completion states as its final answer
    (`verifier/final_answer.py`), so restating the question ("59 + 63 =") scores 0; other gold answers
    (expressions, sets, ...) go to math-verify. Its values are a verdict: the held-out accuracy is theirs.
    """

    is_verdict = True

    def __init__(self, timeout_s: float = 5.0, workers: int = 2, answer_pattern: str | None = None):
        if not timeout_s > 0:
            raise ValueError(f"math reward: timeout_s must be > 0, got {timeout_s}")
        if workers < 1:
            raise ValueError(f"math reward: workers must be >= 1, got {workers}")
        self.timeout_s, self.workers, self.answer_pattern = timeout_s, workers, answer_pattern
        self._answer_regex = None
        if answer_pattern is not None:
            self._answer_regex = re.compile(answer_pattern, re.DOTALL)
            if self._answer_regex.groups != 1:
                raise ValueError(f"math reward: answer_pattern {answer_pattern!r} needs exactly one group")
        self._pool = TimeoutPool(
            math_check.check_answer, workers=workers, timeout_s=2 * timeout_s + 1, prepare=math_check.prepare
        )
        self.last_metrics: dict[str, float] = {}

    def __call__(self, prompts: list[str], completions: list[str], answers: list[str]) -> list[float]:
        texts = [self._answer_text(c) for c in completions]
        todo = [i for i, text in enumerate(texts) if text is not None]
        outcomes = [math_check.NO_ANSWER] * len(completions)
        checked = self._pool.map([(answers[i], texts[i], self.timeout_s) for i in todo])
        for i, outcome in zip(todo, checked, strict=True):
            outcomes[i] = outcome
        for i, outcome in enumerate(outcomes):
            if outcome == math_check.BAD_GOLD:
                raise ValueError(
                    f"math reward: the gold answer {answers[i]!r} of the prompt {prompts[i][:80]!r} does not "
                    f"parse as math; fix the dataset row or its answer extraction"
                )
        self.last_metrics = {
            M.REWARD_PARSE_FAILURES: float(outcomes.count(math_check.NO_ANSWER)),
            M.REWARD_CHECK_TIMEOUTS: float(outcomes.count(math_check.TIMED_OUT)),
        }
        return [1.0 if outcome == math_check.CORRECT else 0.0 for outcome in outcomes]

    def _answer_text(self, completion: str) -> str | None:
        if self._answer_regex is None:
            return completion
        matches = self._answer_regex.findall(completion)
        return matches[-1] if matches else None

    def close(self) -> None:
        """End the worker processes now (they also end with the trainer)."""
        self._pool.close()


def math_reward(timeout_s: float = 5.0, workers: int = 2, answer_pattern: str | None = None) -> MathReward:
    """Factory for `MathReward` (a Hydra `_target_` with keyword arguments)."""
    return MathReward(timeout_s=timeout_s, workers=workers, answer_pattern=answer_pattern)
