"""Paired tests and intervals for variants that share seeds (report.statistics.paired)."""

from __future__ import annotations

import numpy as np
import pytest
from stats_simulation import paired_coverage

from twinkle_exp.report.statistics.intervals import difference_interval
from twinkle_exp.report.statistics.paired import (
    exact_floor,
    exact_p_value,
    paired_interval,
    permutation_p_value,
    sign_flip_p_value,
)


def shared_seed_sample(rng, n=5, shared=0.03, own=0.005, effect=0.01):
    """Two variants whose seeds share a large component (the warm-start, the prompts) of sd `shared`."""
    common = rng.normal(0.0, shared, n)
    return 0.6 + common + effect + rng.normal(0, own, n), 0.6 + common + rng.normal(0, own, n)


def test_the_paired_interval_is_narrower_when_seeds_share_a_component():
    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(200):
        x, y = shared_seed_sample(rng)
        p, u = paired_interval(x, y), difference_interval(x, y)
        assert p.value == pytest.approx(u.value)
        ratios.append((p.high - p.low) / (u.high - u.low))
    assert np.median(ratios) < 0.3  # own sd 0.005 against shared 0.03: about a fifth (0.20)
    assert np.max(ratios) < 1.0


def test_without_a_shared_component_pairing_buys_nothing():
    rng = np.random.default_rng(1)
    ratios = []
    for _ in range(200):
        x, y = shared_seed_sample(rng, shared=0.0, own=0.02)
        p, u = paired_interval(x, y), difference_interval(x, y)
        ratios.append((p.high - p.low) / (u.high - u.low))
    assert 0.9 < np.median(ratios) < 1.4  # fewer df (n - 1 against about 2n - 2): a little wider


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_paired_interval_covers_95_percent(n):
    assert abs(paired_coverage(n) - 0.95) <= 0.02


@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_the_sign_flip_floor_is_two_over_two_to_the_n_exactly(n):
    x = np.arange(1, n + 1) / 10 + 1.0
    y = np.zeros(n)
    assert sign_flip_p_value(x, y) == 2 / 2**n == exact_floor(n, n, paired=True)
    assert sign_flip_p_value(y, x) == 2 / 2**n


def test_the_exact_floors_quoted():
    assert exact_floor(5, 5, paired=True) == 0.0625
    assert exact_floor(5, 5, paired=False) == pytest.approx(0.0079, abs=1e-4)
    assert exact_floor(10, 10, paired=False) == pytest.approx(1.08e-5, rel=1e-2)
    assert exact_floor(10, 10, paired=True) == pytest.approx(0.00195, rel=1e-2)
    # at 5 seeds no exact test can pass Holm over 30 tests
    assert min(exact_floor(5, 5, True), exact_floor(5, 5, False)) > 0.05 / 30


def test_the_permutation_floor_unpaired():
    assert permutation_p_value([1, 2, 3, 4, 5], [-1, -2, -3, -4, -5]) == pytest.approx(2 / 252)
    assert exact_p_value([1, 2, 3], [0, 0, 0.5], paired=False)[1] == "permutation"


def test_the_sign_flip_p_is_uniform_ish_under_the_null():
    rng = np.random.default_rng(2)
    n, sims = 8, 1500
    p = np.array([sign_flip_p_value(*rng.normal(0, 1, (2, n))) for _ in range(sims)])
    error = 2 * np.sqrt(0.25 / sims)
    for alpha in (0.05, 0.1, 0.25, 0.5):
        assert np.mean(p <= alpha) <= alpha + error  # keeps its level
        assert np.mean(p <= alpha) >= alpha - 0.03 - error  # and is not far below it (the grid is 1/256)


def test_pairs_need_the_same_seeds():
    with pytest.raises(ValueError, match="same seeds"):
        paired_interval([0.5, 0.6, 0.7], [0.5, 0.6])
    assert paired_interval([0.5], [0.4]).low is None
