"""The run says plainly when most completions end at rollout.max_new_tokens, naming the steps."""

from __future__ import annotations

import logging

from twinkle_exp.training.rollout_metrics import TruncationWatch


def test_a_mostly_cut_off_rollout_is_warned_of_with_its_steps(caplog):
    watch = TruncationWatch(max_new_tokens=12, truncated_max=None, every=3)
    with caplog.at_level(logging.WARNING, logger="twinkle_exp.training.rollout_metrics"):
        said = [
            watch.observe(ratio, step) for step, ratio in zip(range(0, 40, 4), [0.2] + [0.9] * 9, strict=True)
        ]
    assert said[0] is None  # 20% cut off: fine
    assert said[1] == (
        "90% of the completions of the rollout ending at optimizer step 4 stopped at rollout.max_new_tokens=12 "
        "without EOS (most were, in 1 rollout(s): steps 4); they are scored as they stand "
        "(reward.truncated_max=null), so a rising reward may come from text the model repeats rather than from "
        "an answer. Raise rollout.max_new_tokens or ask the prompt for a shorter answer"
    )
    assert [s is not None for s in said] == [
        False,
        True,
        False,
        False,
        True,
        False,
        False,
        True,
        False,
        False,
    ]
    assert "in 7 rollout(s): steps 4, 8, 12, 16, 20, ..., 28)" in said[7]
    assert len(caplog.records) == 3


def test_the_cap_is_named_when_there_is_one():
    message = TruncationWatch(max_new_tokens=8, truncated_max=0.0).observe(0.75, 10)
    assert "75% of the completions" in message and "capped at reward.truncated_max=0" in message
