"""DAPO's overlong reward shaping (`reward.overlong_buffer`, `reward.overlong_penalty`), against its formula."""

from __future__ import annotations

import pytest
import torch

from twinkle_exp.rewards import RewardFunction, RewardSet
from twinkle_exp.rewards.overlong import OverlongShaping


def dapo_penalty(length: int, max_tokens: int, buffer: int, factor: float) -> float:
    """DAPO (arXiv 2503.14476) eq. 13, scaled as verl's DAPO reward manager scales it (penalty_factor)."""
    expected = max_tokens - buffer
    if length <= expected:
        return 0.0
    if length <= max_tokens:
        return (expected - length) / buffer * factor
    return -factor


@pytest.mark.parametrize(("buffer", "factor"), [(4, 1.0), (16, 0.5), (20, 2.0)])
def test_the_penalty_is_dapos(buffer, factor):
    lengths = torch.arange(0, 21)
    got = OverlongShaping(max_tokens=20, buffer=buffer, penalty=factor)(lengths)
    assert got.tolist() == pytest.approx([dapo_penalty(n, 20, buffer, factor) for n in lengths.tolist()])


def test_it_is_added_after_the_cut_off_cap_and_reported_as_its_own_column():
    rewards = RewardSet(
        [RewardFunction("one", lambda p, c, a: [1.0] * len(c))],
        truncated_max=0.0,
        overlong=OverlongShaping(max_tokens=8, buffer=4, penalty=1.0),
    )
    truncated = torch.tensor([False, False, True])
    total, raw = rewards(["p"] * 3, ["a", "b", "c"], ["x"] * 3, truncated, torch.tensor([3, 6, 8]))
    assert total.tolist() == [
        1.0,
        0.5,
        -1.0,
    ]  # 6 tokens: 2 into the 4-token buffer; cut off: capped at 0, then -1
    assert raw["overlong_penalty"].tolist() == [0.0, -0.5, -1.0]
    assert rewards.columns() == ["one", "overlong_penalty"]


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"buffer": 0}, "buffer must be in 1..8"), ({"penalty": -1.0}, ">= 0")]
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OverlongShaping(**{"max_tokens": 8, "buffer": 4, "penalty": 1.0, **kwargs})


def test_a_buffer_longer_than_the_budget_is_refused_at_start_up(run_cli):
    proc = run_cli("debug=fast", "reward.overlong_buffer=400")
    assert proc.returncode == 2
    assert (
        "reward.overlong_buffer=400: longer than the sampler's budget rollout.max_new_tokens=" in proc.stderr
    )


@pytest.mark.slow
def test_a_run_with_the_penalty_logs_it(run_cli, tmp_path):
    import csv

    proc = run_cli("debug=fast", "logger=csv", "reward.overlong_buffer=4", "trainer.max_steps=4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (metrics,) = tmp_path.glob("outputs/*/*/metrics.csv")
    with open(metrics, newline="") as f:
        logged = [
            float(r["train/rewards/overlong_penalty"])
            for r in csv.DictReader(f)
            if r.get("train/rewards/overlong_penalty")
        ]
    assert logged and all(-1.0 <= v <= 0.0 for v in logged)
