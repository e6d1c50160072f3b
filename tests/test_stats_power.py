"""Minimum detectable effect and seeds needed for the test actually used (report.statistics.power), against
Cohen's table, the full two-tailed noncentral-t power, and the normal approximation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from twinkle_exp.report.statistics.intervals import welch_summary
from twinkle_exp.report.statistics.paired import paired_summary
from twinkle_exp.report.statistics.power import (
    MAX_SEEDS,
    detectable_noncentrality,
    minimum_detectable_effect,
    seeds_needed,
    two_sided_power,
)


@pytest.mark.parametrize(("d", "n"), [(0.2, 394), (0.5, 64), (0.8, 26)])
def test_seeds_needed_matches_cohens_table(d, n):
    assert seeds_needed(d, 1.0, 1.0, alpha=0.05) == n  # two-sample t, 5%, 80% (Cohen 1988, Table 2.4.1)


def test_seeds_needed_paired():
    assert seeds_needed(0.5, 1.0, alpha=0.05) == 34  # paired t, d_z = 0.5


@pytest.mark.parametrize("df", [2, 4, 8, 18, 100])
@pytest.mark.parametrize("alpha", [0.05, 0.05 / 30])
def test_the_noncentrality_gives_80_percent_power_with_both_tails(df, alpha):
    lam = detectable_noncentrality(df, alpha)
    assert two_sided_power(lam, df, alpha) == pytest.approx(0.8, abs=1e-5)


def test_large_samples_reach_the_normal_approximation():
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)  # 2.80
    assert detectable_noncentrality(1e6, 0.05) == pytest.approx(z, rel=1e-4)


def test_mde_at_five_seeds_is_two_pooled_sd():
    x = np.array([-2.0, -1.0, 0.0, 1.0, 2.0]) / np.sqrt(2.5)  # sd 1 exactly
    s = welch_summary(x, x + 5.0)
    assert minimum_detectable_effect(s, 0.05) == pytest.approx(2.0244, abs=1e-3)  # d for n = 5 per group
    assert minimum_detectable_effect(s, 0.05 / 30) > 3.0  # Holm's first step over 30 tests


def test_the_mde_does_not_depend_on_the_observed_difference():
    rng = np.random.default_rng(0)
    x, y = rng.normal(0.6, 0.02, 5), rng.normal(0.6, 0.02, 5)
    mdes = {round(minimum_detectable_effect(welch_summary(x + shift, y), 0.05), 12) for shift in (0, 0.1, -1)}
    assert len(mdes) == 1  # post-hoc power from the observed difference would change with it
    paired = minimum_detectable_effect(paired_summary(x, y), 0.05)
    assert paired == pytest.approx(detectable_noncentrality(4, 0.05) * np.std(x - y, ddof=1) / np.sqrt(5))


def test_seeds_needed_is_the_first_n_that_is_enough():
    sd1, sd2, effect, alpha = 0.02, 0.03, 0.02, 0.05 / 30
    got = seeds_needed(effect, sd1, sd2, alpha=alpha)
    for n, want in ((got - 1, False), (got, True)):
        v1, v2 = sd1**2 / n, sd2**2 / n
        df = (v1 + v2) ** 2 / ((v1**2 + v2**2) / (n - 1))
        assert (two_sided_power(effect / np.sqrt(v1 + v2), df, alpha) >= 0.8) == want


def test_seeds_needed_limits():
    assert seeds_needed(1e-4, 1.0, 1.0, alpha=0.05) == MAX_SEEDS + 1
    assert seeds_needed(0.02, 0.0, 0.0, alpha=0.05) == 2
    with pytest.raises(ValueError, match="nonzero"):
        seeds_needed(0.0, 1.0, 1.0, alpha=0.05)
    with pytest.raises(ValueError, match="alpha"):
        detectable_noncentrality(4, 0.0)
