"""Equivalence within a margin by two one-sided tests (report.statistics.equivalence)."""

from __future__ import annotations

import numpy as np
import pytest

from twinkle_exp.report.statistics.equivalence import equivalence_test, tost_p_values
from twinkle_exp.report.statistics.intervals import welch_summary
from twinkle_exp.report.statistics.paired import paired_summary

MARGIN = 0.02  # 2 accuracy points, scores in [0, 1]


def pair(rng, n, difference, sd=0.005):
    return rng.normal(0.6 + difference, sd, n), rng.normal(0.6, sd, n)


@pytest.mark.parametrize("paired", [False, True])
def test_a_pair_well_inside_the_margin_is_equivalent(paired):
    rng = np.random.default_rng(0)
    result = equivalence_test(*pair(rng, 10, 0.002), MARGIN, paired=paired)
    assert result.equivalent and result.p < 0.001
    assert -MARGIN < result.low < result.high < MARGIN


@pytest.mark.parametrize("paired", [False, True])
def test_a_pair_outside_the_margin_is_not(paired):
    rng = np.random.default_rng(1)
    result = equivalence_test(*pair(rng, 10, 0.035), MARGIN, paired=paired)
    assert not result.equivalent and result.p > 0.5
    assert result.p == result.p_upper  # the upper one-sided test is the one that fails


def test_a_noisy_pair_at_zero_difference_is_not_shown_equivalent():
    rng = np.random.default_rng(2)
    result = equivalence_test(*pair(rng, 3, 0.0, sd=0.03), MARGIN)
    assert not result.equivalent  # absence of evidence is not evidence of equivalence


def test_tost_is_the_90_percent_interval_inside_the_margin():
    rng = np.random.default_rng(3)
    for _ in range(300):
        x, y = pair(rng, 5, rng.uniform(-0.03, 0.03), sd=0.01)
        result = equivalence_test(x, y, MARGIN)
        assert result.equivalent == (result.low > -MARGIN and result.high < MARGIN)


@pytest.mark.parametrize("paired", [False, True])
def test_tost_keeps_its_level_at_the_margin(paired):
    rng = np.random.default_rng(4)
    sims, n = 20_000, 5
    x, y = rng.normal(0.6 + MARGIN, 0.01, (sims, n)), rng.normal(0.6, 0.01, (sims, n))
    s = paired_summary(x, y) if paired else welch_summary(x, y)
    rate = np.mean(tost_p_values(s, MARGIN)[0] < 0.05)
    assert rate <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / sims)
    assert rate >= 0.03  # a difference exactly at the margin is still called equivalent about 5% of the time


def test_bad_margins_and_too_few_seeds_are_refused():
    with pytest.raises(ValueError, match="positive"):
        equivalence_test([0.5, 0.6], [0.5, 0.6], 0.0)
    with pytest.raises(ValueError, match="2 seeds"):
        equivalence_test([0.5], [0.5, 0.6], MARGIN)
