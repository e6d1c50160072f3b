"""The unbiased pass@k estimator (Chen et al. 2021) on hand-built counts, against the closed form written out
here, and against "best of k resampled", which is biased where n is small (issue 31, item 1)."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest

from twinkle_exp.training.pass_at_k import pass_at_k


def closed_form(n: int, c: int, k: int) -> float:
    """1 - C(n - c, k) / C(n, k), in exact rationals (C(m, k) = 0 for m < k)."""
    return float(1 - Fraction(comb(n - c, k), comb(n, k)))


def best_of_k_resampled(n: int, c: int, k: int) -> float:
    """k draws with replacement from the n samples, the best of them: 1 - (1 - c / n)^k."""
    return 1.0 - (1.0 - c / n) ** k


@pytest.mark.parametrize("n", [1, 2, 5, 8, 16])
def test_pass_at_k_equals_the_closed_form_for_every_count_and_k(n):
    counts = np.arange(n + 1)
    for k in range(1, n + 1):
        expected = [closed_form(n, c, k) for c in counts]
        assert pass_at_k(counts, n, k) == pytest.approx(expected, abs=1e-12)


def test_hand_counted_cases():
    # n = 5, c = 2, k = 2: 10 pairs, the 3 of the 3 wrong samples miss: 1 - 3/10
    assert pass_at_k(np.array([2]), 5, 2)[0] == pytest.approx(0.7, abs=1e-15)
    # pass@1 is the share right: c / n
    assert pass_at_k(np.array([3]), 8, 1)[0] == pytest.approx(3 / 8, abs=1e-15)
    # fewer wrong samples than k: every k-subset holds a right one
    assert pass_at_k(np.array([2, 0]), 4, 3).tolist() == [1.0, 0.0]


def test_stable_where_the_binomials_overflow_float64():
    n, c, k = 2000, 3, 1000
    with pytest.raises(OverflowError):  # C(2000, 1000) is about 1e600: the ratio of floats cannot be formed
        float(comb(n, k))
    got = pass_at_k(np.array([c]), n, k)[0]
    assert got == pytest.approx(closed_form(n, c, k), rel=1e-12)
    assert np.isfinite(got)


def _expectation(estimate, n: int, k: int, p: float) -> float:
    """E over c ~ Binomial(n, p) of estimate(c), summed exactly over c = 0..n."""
    return sum(comb(n, c) * p**c * (1 - p) ** (n - c) * estimate(c) for c in range(n + 1))


@pytest.mark.parametrize(("n", "k", "p"), [(4, 4, 0.3), (8, 4, 0.1), (16, 8, 0.05), (16, 16, 0.2)])
def test_unbiased_where_best_of_k_resampled_is_biased_low(n, k, p):
    truth = 1 - (1 - p) ** k  # a prompt solved with probability p per sample: pass@k of the population
    unbiased = _expectation(lambda c: pass_at_k(np.array([c]), n, k)[0], n, k, p)
    resampled = _expectation(lambda c: best_of_k_resampled(n, c, k), n, k, p)
    assert unbiased == pytest.approx(truth, abs=1e-12)
    assert truth - resampled > 0.02  # biased low by more than two points at these small n


def test_the_two_estimates_differ_on_one_hand_built_prompt():
    # 1 right of 4, k = 4: all four samples are the only 4-subset, so pass@4 = 1; resampling misses it
    # with probability (3/4)^4
    assert pass_at_k(np.array([1]), 4, 4)[0] == 1.0
    assert best_of_k_resampled(4, 1, 4) == pytest.approx(1 - 0.75**4)


def test_bad_counts_and_k_are_refused():
    with pytest.raises(ValueError, match="1 <= k <= n = 4"):
        pass_at_k(np.array([1]), 4, 5)
    with pytest.raises(ValueError, match="must lie in 0..n = 4"):
        pass_at_k(np.array([5]), 4, 2)
