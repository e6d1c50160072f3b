"""The scratchpad task: free text, a separator, then the answer; only the answer is scored (issue 20, item 1)."""

from __future__ import annotations

import random

import pytest

from twinkle_exp.policy.build import tiny_policy
from twinkle_exp.rewards import answer_after_separator
from twinkle_exp.tasks import TASKS, ReverseTask, ScratchpadTask
from twinkle_exp.training.warmup import supervised_batch


def test_prompts_answers_and_demonstrations():
    task = ScratchpadTask(min_len=3, max_len=5, max_filler=8)
    for ex in task.sample(300, random.Random(0)) + task.validation_set():
        text = ex.prompt[len("pad:") : -1]
        assert ex.prompt.startswith("pad:") and ex.prompt.endswith("=")
        assert ex.answer == text[::-1]
        filler, sep, answer = ex.demonstration.rpartition("|")
        assert sep == "|" and answer == ex.answer and set(filler) <= {"."} and len(filler) <= 8
    assert TASKS["scratchpad"] is ScratchpadTask


def test_the_warm_start_sees_varied_filler_lengths_uniformly():
    task = ScratchpadTask(min_filler=0, max_filler=8)
    lengths = [len(ex.demonstration) - len(ex.answer) - 1 for ex in task.sample(2000, random.Random(1))]
    counts = [lengths.count(n) for n in range(9)]
    assert min(counts) > 150 and max(counts) < 300  # ~222 each of 0..8


def test_the_warm_start_imitates_the_demonstration_not_the_bare_answer():
    policy = tiny_policy(d_model=16, n_layers=1, n_heads=2)
    ex = ScratchpadTask().sample(1, random.Random(3))[0]
    _, _, labels = supervised_batch(policy, [ex])
    target = labels[0][labels[0] != -100].tolist()
    assert target == policy.tokenizer.encode(ex.demonstration) + [policy.tokenizer.eos_token_id]
    rev = ReverseTask().sample(1, random.Random(3))[0]  # a task without demonstrations: the answer alone
    _, _, labels = supervised_batch(policy, [rev])
    assert labels[0][labels[0] != -100].tolist() == policy.tokenizer.encode(rev.answer) + [2]


@pytest.mark.parametrize(
    "completion,score",
    [
        ("...|cba", 1.0),  # filler, separator, answer
        ("|cba", 1.0),  # no filler
        ("........|cba", 1.0),  # the length of the free text is not scored
        ("cba", 0.0),  # no separator: no answer
        ("..|abc", 0.0),
        ("|x|cba", 1.0),  # the last separator counts
        ("...|cba|", 0.0),
    ],
)
def test_only_the_text_after_the_last_separator_is_scored(completion, score):
    task = ScratchpadTask()
    reward = answer_after_separator("|")
    assert reward(["pad:abc="], [completion], ["cba"]) == [score]
    assert (task.completion_answer(completion) == "cba") == (score == 1.0)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"separator": "a"}, "also occurs"),
        ({"separator": "||"}, "one character"),
        ({"min_filler": 3, "max_filler": 2}, "min_filler"),
        ({"filler": ""}, "filler"),
    ],
)
def test_bad_parameters_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ScratchpadTask(**kwargs)


def test_reverse_answers_are_the_whole_completion():
    assert ReverseTask().completion_answer("cba") == "cba"


def test_reverse_with_pad_aligns_every_prompt_on_max_len():
    task = ReverseTask(min_len=3, max_len=6, pad="_")
    examples = task.sample(200, random.Random(0))
    assert {len(ex.prompt) for ex in examples} == {len("rev:") + 6 + 1}
    for ex in examples:
        assert ex.prompt[4:-1].lstrip("_")[::-1] == ex.answer
    assert ReverseTask().sample(1, random.Random(0))[0].prompt.count("_") == 0  # off by default
    with pytest.raises(ValueError, match="pad must be one character outside the alphabet"):
        ReverseTask(pad="a")


@pytest.mark.parametrize(
    "completion,score",
    [("cba|....", 1.0), ("cba|", 1.0), ("cba", 0.0), ("cba|x|y", 1.0), ("abc|...", 0.0), ("|cba", 0.0)],
)
def test_answer_first_scores_the_text_before_the_first_separator(completion, score):
    task = ScratchpadTask(answer_first=True)
    assert answer_after_separator("|", answer_first=True)(["pad:abc="], [completion], ["cba"]) == [score]
    assert (task.completion_answer(completion) == "cba") == (score == 1.0)
    ex = task.sample(1, random.Random(5))[0]
    answer, sep, filler = ex.demonstration.partition("|")
    assert answer == ex.answer and sep == "|" and set(filler) <= {"."}
