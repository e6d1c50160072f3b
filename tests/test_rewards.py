import math
import pickle

import pytest
import torch

from twinkle_exp.rewards import (
    LengthPenalty,
    RewardFunction,
    RewardSet,
    exact_match,
    length_penalty,
    partial_credit,
)


def _call(fn, completions, answers):
    return fn(["p"] * len(completions), completions, answers)


def test_exact_match_strips_whitespace():
    got = _call(exact_match, ["357", " 357\n", "35", "3570", ""], ["357", "357", "357", "357", "357"])
    assert got == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_partial_credit_hand_computed():
    completions = ["357", "351", "35", "3570", "753", "", " 357 ", ""]
    answers = ["357", "357", "357", "357", "357", "357", "357", ""]
    got = _call(partial_credit, completions, answers)
    expected = [
        1.0,  # all 3 positions right
        2 / 3,  # "35" right, last wrong
        2 / 3,  # 2 right / max(2, 3): a short prefix gets its share
        3 / 4,  # 3 right / max(4, 3): the extra character costs credit
        1 / 3,  # only the middle "5" lines up
        0.0,  # nothing produced
        1.0,  # whitespace stripped, as in exact_match
        1.0,  # empty answer and empty completion match
    ]
    assert got == pytest.approx(expected)


def test_partial_credit_is_one_only_on_exact_match():
    assert _call(partial_credit, ["3577777"], ["357"]) == [pytest.approx(3 / 7)]


def test_length_penalty_hand_computed():
    completions = ["357", "35", "3570", "357000", "35700000"]
    got = _call(length_penalty(), completions, ["357"] * 5)
    # extra chars 0, 0, 1, 3, 5 over a 3-char answer: -1/3 each, capped at -1
    assert got == pytest.approx([0.0, 0.0, -1 / 3, -1.0, -1.0])


def test_length_penalty_allowance_and_slope():
    assert _call(length_penalty(max_extra=1), ["3570", "35700"], ["357", "357"]) == pytest.approx(
        [0.0, -1 / 3]
    )
    # penalty 0.5: 3 extra chars / 3 answer chars * 0.5
    assert _call(length_penalty(penalty=0.5), ["357000"], ["357"]) == pytest.approx([-0.5])
    # an empty answer counts as length 1, so 2 extra characters hit the -1 floor
    assert _call(length_penalty(), ["ab"], [""]) == [-1.0]


def test_length_penalty_validates_and_pickles():
    with pytest.raises(ValueError, match="max_extra"):
        length_penalty(max_extra=-1)
    with pytest.raises(ValueError, match="penalty"):
        length_penalty(penalty=math.inf)
    fn = pickle.loads(pickle.dumps(length_penalty(max_extra=2)))  # worker processes receive it pickled
    assert fn == LengthPenalty(max_extra=2, penalty=1.0)


def _three_term_set():
    return RewardSet(
        [
            RewardFunction("exact", exact_match, 1.0),
            RewardFunction("partial", partial_credit, 0.5),
            RewardFunction("length", length_penalty(), 2.0),
        ]
    )


def test_reward_set_weighted_sum():
    completions, answers = ["357", "3570", "35"], ["357"] * 3
    total, raw = _three_term_set()(["12+345="] * 3, completions, answers)
    assert list(raw) == ["exact", "partial", "length"]
    assert raw["exact"].tolist() == [1.0, 0.0, 0.0]
    assert raw["partial"].tolist() == pytest.approx([1.0, 0.75, 2 / 3])
    assert raw["length"].tolist() == pytest.approx([0.0, -1 / 3, 0.0])
    # 1*1 + 0.5*1 + 2*0 = 1.5;  1*0 + 0.5*0.75 + 2*(-1/3) = -0.291666...;  0 + 0.5*(2/3) + 0 = 1/3
    assert total.tolist() == pytest.approx([1.5, 0.375 - 2 / 3, 1 / 3])
    assert total.dtype == torch.float32 and total.shape == (3,)
    assert all(v.dtype == torch.float32 and v.shape == (3,) for v in raw.values())


def test_reward_set_custom_function_and_prompt_passing():
    seen = {}

    def prompt_len(prompts, completions, answers):
        seen["prompts"] = prompts
        return [len(p) for p in prompts]  # ints are accepted as numbers

    total, raw = RewardSet([RewardFunction("plen", prompt_len, -0.5)])(["ab", "abcd"], ["x", "y"], ["1", "2"])
    assert seen["prompts"] == ["ab", "abcd"]
    assert total.tolist() == [-1.0, -2.0]
    assert raw["plen"].tolist() == [2.0, 4.0]


def test_reward_set_empty_batch():
    total, raw = _three_term_set()([], [], [])
    assert total.shape == (0,) and raw["exact"].shape == (0,)


@pytest.mark.parametrize(
    "fn, match",
    [
        (lambda p, c, a: [1.0], r"'bad' returned 1 values for 2 completions"),
        (lambda p, c, a: torch.ones(2), r"'bad' must return a list of 2 floats, got Tensor"),
        (lambda p, c, a: None, r"'bad' must return a list"),
        (lambda p, c, a: [1.0, math.nan], r"'bad': value 1 is not finite"),
        (lambda p, c, a: [math.inf, 0.0], r"'bad': value 0 is not finite"),
        (lambda p, c, a: [1.0, "1"], r"'bad': value 1 is '1', not a number"),
        (lambda p, c, a: [1e39, 0.0], r"'bad': a value is too large for float32"),
    ],
)
def test_reward_set_rejects_bad_outputs(fn, match):
    rs = RewardSet([RewardFunction("ok", exact_match), RewardFunction("bad", fn)])
    with pytest.raises(ValueError, match=match):
        rs(["p", "q"], ["1", "2"], ["1", "2"])


def test_reward_set_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="same length"):
        _three_term_set()(["p"], ["1", "2"], ["1", "2"])


def test_reward_set_total_overflow():
    rs = RewardSet([RewardFunction("big", lambda p, c, a: [3e38], 2.0)])
    with pytest.raises(ValueError, match="overflows float32"):
        rs(["p"], ["c"], ["a"])


def test_reward_set_construction_errors():
    with pytest.raises(ValueError, match="at least one"):
        RewardSet([])
    with pytest.raises(ValueError, match=r"repeated: \['exact'\]"):
        RewardSet([RewardFunction("exact", exact_match), RewardFunction("exact", partial_credit)])
    with pytest.raises(ValueError, match="weight must be finite"):
        RewardFunction("w", exact_match, math.nan)
    with pytest.raises(ValueError, match="weight must be a number"):
        RewardFunction("w", exact_match, "1.0")
    with pytest.raises(ValueError, match="must be callable"):
        RewardFunction("w", "exact_match")
    with pytest.raises(ValueError, match="non-empty string"):
        RewardFunction("", exact_match)


def test_random_reward_ignores_the_answer_and_is_reproducible():
    from twinkle_exp.rewards import RandomReward

    prompts, answers = ["p"] * 4000, ["3"] * 4000
    right, wrong = ["3"] * 4000, ["4"] * 4000
    first, again = RandomReward(0.5, seed=7), RandomReward(0.5, seed=7)
    a = first(prompts, right, answers)
    assert a == again(prompts, wrong, answers)  # the same draw whatever the completions say
    assert set(a) == {0.0, 1.0} and abs(sum(a) / len(a) - 0.5) < 0.03  # Bernoulli(0.5): sd 0.008
    assert first(prompts, right, answers) != a  # each call draws afresh
    assert RandomReward(0.0)(prompts, right, answers) == [0.0] * 4000
    with pytest.raises(ValueError, match=r"probability must lie in \[0, 1\]"):
        RandomReward(1.5)
