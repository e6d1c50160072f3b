"""reward=math (math-verify in worker processes, each answer with a time limit) and the format reward."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from twinkle_exp import metric_names as M
from twinkle_exp.rewards import (
    FormatReward,
    RewardFunction,
    RewardSet,
    exact_match,
    format_reward,
    math_reward,
)
from twinkle_exp.verifier.pool import TIMED_OUT, TimeoutPool

# Parses fine, then sends sympy into 9^(9^(9^(9^9))): minutes at least, if it ever ends.
PATHOLOGICAL = r"\boxed{9^{9^{9^{9^{9}}}}}"


@pytest.fixture(scope="module")
def checker():
    reward = math_reward(timeout_s=1.0, workers=2)
    yield reward
    reward.close()


def test_equal_answers_score_one_whatever_their_form(checker):
    completions = [r"so \boxed{72}", "The answer is 72.", "72.0", "73", r"$\frac{1}{2}$", "0.5", "1,000"]
    answers = ["72", "72", "72", "72", "0.5", "1/2", "1000"]
    assert checker(["p"] * 7, completions, answers) == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    assert checker.last_metrics == {M.REWARD_PARSE_FAILURES: 0.0, M.REWARD_CHECK_TIMEOUTS: 0.0}


def test_restating_the_question_scores_nothing(checker):
    """math-verify alone evaluates "59 + 63 =" to 122: the verdict must be on the stated answer."""
    completions = ["59 + 63 =", "The answer is 59+63", "59 + 63 = 121", "59 + 63 = 122", r"\boxed{59+63}"]
    assert checker(["What is 59 + 63?"] * 5, completions, ["122"] * 5) == [0.0, 0.0, 0.0, 1.0, 0.0]
    assert checker.last_metrics[M.REWARD_PARSE_FAILURES] == 3.0  # no stated number: 1st, 2nd, boxed sum


def test_symbolic_gold_answers_still_go_to_math_verify():
    reward = math_reward(timeout_s=10.0, workers=1)  # sympy's first parse is slow on a loaded machine
    try:
        completions = [r"\boxed{\sqrt{2}}", r"so it is $\sqrt{2}$", r"\boxed{2}"]
        assert reward(["p"] * 3, completions, [r"$\sqrt{2}$"] * 3) == [1.0, 1.0, 0.0]
        assert reward.last_metrics[M.REWARD_CHECK_TIMEOUTS] == 0.0
    finally:
        reward.close()


def test_from_a_worker_thread_a_pathological_completion_times_out_alone(checker):
    """math-verify's own timeout (signal.alarm) fails outside the main thread; the pool's does not."""
    got: dict = {}

    def score() -> None:
        start = time.monotonic()
        # A symbolic gold answer, so that math-verify (and sympy) evaluate the pathological completion.
        answers = ["7", "2^{10}", "7", "7"]
        got["rewards"] = checker(["p"] * 4, ["\\boxed{7}", PATHOLOGICAL, "no number", "7"], answers)
        got["seconds"] = time.monotonic() - start
        got["metrics"] = dict(checker.last_metrics)

    thread = threading.Thread(target=score)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the math reward hung"
    assert got["rewards"] == [1.0, 0.0, 0.0, 1.0]  # correct answers still score from a thread
    assert got["metrics"] == {M.REWARD_PARSE_FAILURES: 1.0, M.REWARD_CHECK_TIMEOUTS: 1.0}
    assert got["seconds"] < 10  # the 1 s limit (soft; the hard one is 3 s), not minutes
    assert checker(["p"], ["7"], ["7"]) == [1.0]  # and the pool still works afterwards


def test_a_gold_answer_that_does_not_parse_is_refused_by_name(checker):
    with pytest.raises(
        ValueError, match=r"gold answer 'banana' of the prompt 'How many apples\?' does not parse"
    ):
        checker(["Where?", "How many apples?"], ["1", "2"], ["1", "banana"])


def test_answer_pattern_checks_the_last_tagged_answer_only():
    reward = math_reward(timeout_s=1.0, workers=1, answer_pattern="<answer>(.*?)</answer>")
    try:
        completions = ["<answer>3</answer> then <answer>4</answer>", "4", "<answer>4</answer>"]
        assert reward(["p"] * 3, completions, ["4"] * 3) == [1.0, 0.0, 1.0]
        assert reward.last_metrics[M.REWARD_PARSE_FAILURES] == 1.0  # no tag: nothing to check
    finally:
        reward.close()
    with pytest.raises(ValueError, match="needs exactly one group"):
        math_reward(answer_pattern="<answer>.*</answer>")


def test_reward_set_reports_what_its_functions_counted(checker):
    rewards = RewardSet([RewardFunction("math", checker), RewardFunction("exact", exact_match, 0.5)])
    total, raw = rewards(["p"] * 3, ["7", "eight", "7.0"], ["7"] * 3)
    assert raw["math"].tolist() == [1.0, 0.0, 1.0] and raw["exact"].tolist() == [1.0, 0.0, 0.0]
    assert total.tolist() == [1.5, 0.0, 1.0]
    assert rewards.last_metrics == {M.REWARD_PARSE_FAILURES: 1.0, M.REWARD_CHECK_TIMEOUTS: 0.0}


def test_format_reward():
    fmt = format_reward()
    assert fmt(
        ["p"] * 3, ["<answer>4</answer>", "<answer></answer>", "x <answer>\n4\n</answer>"], [""] * 3
    ) == [
        1.0,
        0.0,
        1.0,
    ]
    assert FormatReward(r"\\boxed\{.+\}")(["p"] * 2, [r"so \boxed{3}", "3"], [""] * 2) == [1.0, 0.0]
    with pytest.raises(ValueError, match="not a regular expression"):
        format_reward("(")


def test_pool_kills_a_call_that_ignores_every_signal():
    pool = TimeoutPool(time.sleep, workers=2, timeout_s=0.5)  # sleep runs in C: nothing interrupts it
    try:
        start = time.monotonic()
        assert pool.map([(0.05,), (60,), (0.05,), (0.05,)]) == [None, TIMED_OUT, None, None]
        assert time.monotonic() - start < 30
        assert pool.map([(0.01,)]) == [None]  # the killed worker was replaced
    finally:
        pool.close()


def test_pool_survives_a_worker_dying_mid_call_and_reports_real_errors():
    pool = TimeoutPool(os._exit, workers=1, timeout_s=5.0)
    try:
        assert pool.map([(3,), (4,)]) == [TIMED_OUT, TIMED_OUT]  # each call killed its worker
    finally:
        pool.close()
    pool = TimeoutPool(int, workers=1, timeout_s=5.0)
    try:
        with pytest.raises(RuntimeError, match="int.*failed: ValueError"):
            pool.map([("12",), ("twelve",)])
        assert pool.map([("12",)]) == [12]
    finally:
        pool.close()


def test_a_worker_that_cannot_start_is_an_error_not_a_timeout():
    pool = TimeoutPool(int, workers=1, timeout_s=5.0, prepare=sys.exit)
    with pytest.raises(RuntimeError, match="exited while starting"):
        pool.map([("1",)])
