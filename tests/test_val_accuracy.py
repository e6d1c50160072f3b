"""val/accuracy is the reward's own verdict where it gives one (reward=math), else exact match."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from twinkle_exp import metric_names as M
from twinkle_exp.rewards import RewardFunction, RewardSet, exact_match, math_reward
from twinkle_exp.tasks import Example
from twinkle_exp.training import evaluation

COMPLETIONS = ["72", "The answer is 72.", "59 + 63 =", r"\boxed{122}"]
TRUNCATED = [False, False, False, True]
EXAMPLES = [Example("What is 70 + 2?", "72")] * 2 + [Example("What is 59 + 63?", "122")] * 2


@pytest.fixture
def fixed_completions(monkeypatch):
    """Greedy decoding replaced by the completions above, the last one cut off at the budget."""

    def generate(model, tokenizer, prompts, options, **kwargs):
        n = len(prompts)
        return SimpleNamespace(completions=COMPLETIONS[:n], truncated=torch.tensor(TRUNCATED[:n]))

    monkeypatch.setattr(evaluation, "generate", generate)


def _metrics(rewards: RewardSet) -> dict[str, float]:
    totals = evaluation.greedy_totals(
        nn.Linear(1, 1), None, EXAMPLES, rewards, max_new_tokens=4, batch_size=len(EXAMPLES)
    )
    return evaluation.validation_metrics(totals)


def test_math_accuracy_is_the_math_verdict(fixed_completions):
    fn = math_reward(timeout_s=2.0, workers=1)
    try:
        metrics = _metrics(RewardSet([RewardFunction("math", fn)], truncated_max=None))
    finally:
        fn.close()
    # "72" and "The answer is 72." are right; the restated question is not; the cut-off one is not counted.
    assert metrics[M.VAL_ACCURACY] == pytest.approx(2 / 4)
    assert metrics[M.VAL_REWARD_MEAN] == pytest.approx(3 / 4)  # truncated_max=None: the cut-off one scores


def test_without_a_verdict_accuracy_stays_exact_match(fixed_completions):
    rewards = RewardSet([RewardFunction("exact", exact_match)])
    assert _metrics(rewards)[M.VAL_ACCURACY] == pytest.approx(1 / 4)
