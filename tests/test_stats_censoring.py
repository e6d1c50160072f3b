"""Steps to a threshold as a censoring-aware statistic (report.statistics.censoring): runs that never
reach the threshold count, and arms rank by how fast their runs got there."""

from __future__ import annotations

import numpy as np
import pytest

from twinkle_exp.report.statistics.censoring import (
    first_reach,
    followed_to_horizon,
    km_median,
    restricted_mean,
    restricted_times,
    time_to_threshold,
)
from twinkle_exp.report.statistics.verdicts import PairData, pair_verdicts

HORIZON = 200.0  # max_steps: every run logged up to here


def test_the_old_bug_one_of_three_at_40_is_not_ahead_of_three_of_three_at_80():
    # the old table averaged the runs that reached it: 40 (1 of 3) looked faster than 80 (3 of 3)
    lucky = time_to_threshold([40, 200, 200], [True, False, False], HORIZON)
    steady = time_to_threshold([80, 80, 80], [True, True, True], HORIZON)
    assert steady.value < lucky.value  # lower is faster: 80 against (40 + 200 + 200) / 3
    assert steady.value == pytest.approx(80.0) and lucky.value == pytest.approx(440 / 3)
    assert (lucky.reached, lucky.runs, lucky.fraction_reached) == (1, 3, pytest.approx(1 / 3))
    assert steady.fraction_reached == 1.0
    assert steady.median == 80.0 and lucky.median is None  # fewer than half got there


def test_the_per_run_values_rank_the_arms_right_in_a_pair_verdict_too():
    lucky = restricted_times([40] + [200] * 9, [True] + [False] * 9, HORIZON)
    steady = restricted_times([80, 85, 78, 90, 82, 79, 88, 84, 81, 86], [True] * 10, HORIZON)
    _, (v,) = pair_verdicts([PairData("steady", "lucky", "steps", tuple(steady), tuple(lucky))], "steps")
    assert v.effect < 0 and v.high < 0  # steady reaches it sooner, and the interval says so
    assert v.verdict == "different"


def test_kaplan_meier_area_by_hand_with_a_run_stopped_early():
    # 10 reached; 20 stopped without reaching; 30 reached. S = 1 to 10, 2/3 to 30, then 0 (one at risk)
    assert restricted_mean([10, 20, 30], [True, False, True], 40) == pytest.approx(10 + 20 * 2 / 3)
    # 10 r, 20 c, 30 r, 50 r, horizon 60: 10 + 20 * 3/4 + 20 * 3/8
    result = time_to_threshold([10, 20, 30, 50], [True, False, True, True], 60)
    assert result.value == pytest.approx(32.5)
    assert result.median == 30.0
    assert "Greenwood" in result.method and 0 <= result.low < result.value < result.high <= 60


def test_the_area_is_the_mean_of_truncated_times_when_every_run_reached_the_horizon():
    rng = np.random.default_rng(0)
    for _ in range(50):
        times = rng.integers(0, 300, 6).astype(float)
        reached = times < HORIZON
        times[~reached] = HORIZON  # never reached: logged to the end
        assert followed_to_horizon(times, reached, HORIZON)
        got = time_to_threshold(times, reached, HORIZON)
        assert got.value == pytest.approx(np.mean(np.minimum(times, HORIZON)))
        assert got.method.startswith("t interval") and 0 <= got.low <= got.value <= got.high <= HORIZON


def test_no_run_reaching_it_gives_the_horizon():
    result = time_to_threshold([200, 200], [False, False], HORIZON)
    assert result.value == HORIZON and result.reached == 0 and result.median is None
    assert km_median([200, 200], [False, False], HORIZON) is None


def test_first_reach_censors_at_the_last_step():
    assert first_reach([0, 20, 40, 60], [0.2, 0.5, 0.7, 0.9], 0.7) == (40.0, True)
    assert first_reach([0, 20, 40], [0.2, 0.5, 0.6], 0.7) == (40.0, False)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="stopped before"):
        restricted_times([50, 120], [False, True], HORIZON)
    with pytest.raises(ValueError, match="horizon"):
        time_to_threshold([10], [True], 0)
    with pytest.raises(ValueError, match="finite steps"):
        time_to_threshold([10, -1], [True, True], HORIZON)
    with pytest.raises(ValueError, match="as many steps"):
        first_reach([0, 1], [0.5], 0.4)
