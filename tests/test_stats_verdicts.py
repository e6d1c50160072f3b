"""Three verdicts for a pair, five for a finding, every number in a flat row (report.statistics.verdicts);
and the sweep-level property issue 29 asks for, at the function level.

Sweeps: 6 variants x 5 seeds x 2 scores (AUC and final accuracy, correlation 0.7, sd 2 points), all 15 pairs
on both scores through `pair_verdicts` with Holm. Figures from `python tests/stats_simulation.py` (1000
sweeps each, Monte Carlo error about 0.7%): identical variants give at least one "different" in 2.5% of
sweeps at 5 seeds and 4.1% at 10 (49.8% without adjustment, the old report's 50%); a variant better by 2.5
sd is called "different" from each other variant on AUC 31.9% of the time at 5 seeds and 95.4% at 10.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from stats_simulation import collapse_level, detection_rate, false_call_rate, sweep
from stats_simulation import test_level as rejection_rate

from twinkle_exp.report.statistics.power import two_sided_power
from twinkle_exp.report.statistics.verdicts import (
    CONTRADICTED,
    DEFAULT_MARGINS,
    DIFFERENT,
    EQUIVALENT,
    INCONCLUSIVE,
    NON_INFERIOR,
    NOT_TESTED,
    PRECONDITION_ABSENT,
    PairData,
    PairVerdict,
    Precondition,
    decide,
    finding_verdict,
    pair_verdicts,
)


def data(first, second, diff, n=10, sd=0.01, score="AUC", seed=0, paired=False):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(0.6 + diff, sd, n), rng.normal(0.6, sd, n)
    return PairData(first, second, score, tuple(x), tuple(y), paired)


def fixed(first, second, diff, n, sd, score="AUC"):
    """Scores whose sample sd is exactly `sd` on both sides and whose means differ by exactly `diff`."""
    z = np.linspace(-1, 1, n)
    z = z / np.std(z, ddof=1)
    return PairData(first, second, score, tuple(0.6 + diff + sd * z), tuple(0.6 + sd * z[::-1]))


def one(d, **kwargs) -> PairVerdict:
    _, (v,) = pair_verdicts([d], "test", **kwargs)
    return v


def test_a_clear_difference_is_different():
    v = one(data("a", "b", 0.05))
    assert v.verdict == DIFFERENT and v.low > 0 and v.p_adjusted < 0.05 and v.test == "Welch t"


def test_a_tight_pair_inside_the_margin_is_equivalent():
    v = one(data("a", "b", 0.0, n=10, sd=0.005))
    assert v.verdict == EQUIVALENT and v.margin == 0.02 and v.p_equivalence_adjusted < 0.05


def test_a_noisy_pair_is_inconclusive_with_what_it_could_have_detected():
    v = one(fixed("a", "b", 0.005, n=3, sd=0.03))
    assert v.verdict == INCONCLUSIVE
    # Welch se 0.03 sqrt(2/3) = 0.0245 at df 4: lambda 3.76, so 9.2 points; the 2-point margin at sd 0.03
    # (d = 0.67) needs 37 seeds a side
    assert v.mde == pytest.approx(0.0921, abs=5e-4) and v.seeds_needed == 37


def test_the_family_adjustment_decides():
    target = fixed("a", "b", 0.02, n=5, sd=0.01)  # t = 3.16 at df 8: p = 0.013
    alone = one(target)
    assert alone.p_raw == pytest.approx(0.0134, abs=5e-4) and alone.verdict == DIFFERENT
    nulls = [data(f"n{i}", f"m{i}", 0.0, n=5, seed=10 + i) for i in range(29)]
    family, verdicts = pair_verdicts([target, *nulls], "thirty")
    inside = verdicts[0]
    assert family.size == 30 and inside.family_size == 30
    assert inside.p_raw == alone.p_raw and inside.p_adjusted >= inside.p_raw
    assert inside.p_adjusted > 0.05 and inside.verdict != DIFFERENT
    assert inside.mde > alone.mde  # detectable at alpha / 30, not alpha


def test_different_needs_the_interval_to_exclude_zero_as_well():
    assert decide(0.01, 0.1, 0.2, None, 0.05) == DIFFERENT
    assert decide(0.01, -0.1, 0.2, None, 0.05) == INCONCLUSIVE
    assert decide(0.2, -0.1, 0.2, 0.01, 0.05) == EQUIVALENT
    assert decide(0.01, 0.001, 0.01, 0.01, 0.05) == DIFFERENT  # significant and inside the margin


def test_a_score_without_a_margin_is_never_equivalent():
    v = one(data("a", "b", 0.0, n=10, sd=0.001, score="train/kl (last quarter)"))
    assert v.margin is None and v.p_equivalence is None and v.seeds_needed is None
    assert v.verdict == INCONCLUSIVE
    assert DEFAULT_MARGINS == {"AUC": 0.02, "final accuracy": 0.02}


def test_paired_data_use_the_paired_tests():
    v = one(data("a", "b", 0.01, n=5, paired=True))
    assert v.paired and v.test == "paired t" and v.exact_test == "sign-flip permutation"
    assert v.p_exact >= 2 / 2**5


def test_at_five_seeds_under_holm_the_seeds_cannot_decide_even_a_huge_difference():
    # The t alone would call v5's pairs (p far below 0.05 / 30), but the exact test's floor at 5 vs 5 seeds
    # (2 / C(10, 5) = 0.0079) is above the level: the rows say so instead of calling them.
    pairs = sweep(np.random.default_rng(6), 5, shift=10.0)
    _, verdicts = pair_verdicts(pairs, "s")
    assert not any(v.verdict == DIFFERENT for v in verdicts)
    v5 = [v for v in verdicts if v.second == "v5"]
    assert v5 and all(v.p_adjusted < 0.05 and not v.decidable for v in v5)
    assert all(v.exact_floor == pytest.approx(2 / math.comb(10, 5)) for v in verdicts)
    _, at_ten = pair_verdicts(sweep(np.random.default_rng(6), 10, shift=10.0), "s")
    called = [v for v in at_ten if v.verdict == DIFFERENT]
    assert called and all(v.second == "v5" and v.decidable and v.p_exact_adjusted < 0.05 for v in called)


def test_zero_spread_is_not_tested_never_different():
    # (c): 2 seeds at 20.0 against 2 seeds at 10.0, no spread at all: a zero-width interval, no test.
    flat = PairData("a", "b", "AUC", (0.2, 0.2), (0.1, 0.1), paired=True)
    v = one(flat)
    assert v.verdict == NOT_TESTED and v.low == v.high == pytest.approx(0.1) and v.p_raw == 1.0
    unpaired = one(PairData("a", "b", "AUC", (0.2, 0.2, 0.2), (0.1, 0.1, 0.1)))
    assert unpaired.verdict == NOT_TESTED
    assert finding_verdict("flat", flat, +1).verdict == NOT_TESTED
    same_shift = PairData("a", "b", "AUC", (0.3, 0.5, 0.7), (0.2, 0.4, 0.6), paired=True)
    assert one(same_shift).verdict == NOT_TESTED  # every seed differs by exactly 0.1


def test_a_greater_or_equal_claim_is_a_non_inferiority_test_against_its_margin():
    # (e): 1.8 points below with margin 2 (the interval reaches past -2): inconclusive, not contradicted.
    below = fixed("t", "c", -0.018, n=10, sd=0.015)
    v = finding_verdict("at least as well", below, +1, margin=0.02, at_least=True)
    assert v.low < -0.02 < v.high < 0 and v.verdict == INCONCLUSIVE
    assert 0.025 < v.p_noninferiority < 1
    # the same interval wholly below -margin: contradicted; wholly above it: non-inferior, though below 0
    far = finding_verdict("at least", fixed("t", "c", -0.05, n=10, sd=0.005), +1, margin=0.02, at_least=True)
    assert far.verdict == CONTRADICTED
    near = finding_verdict(
        "at least", fixed("t", "c", -0.005, n=10, sd=0.003), +1, margin=0.02, at_least=True
    )
    assert near.high < 0 and near.verdict == NON_INFERIOR
    # "<=" (expected -1) mirrors it
    at_most = fixed("t", "c", 0.005, n=10, sd=0.003)
    assert finding_verdict("at most", at_most, -1, margin=0.02, at_least=True).verdict == NON_INFERIOR
    beyond = fixed("t", "c", 0.05, n=10, sd=0.005)
    assert finding_verdict("at most", beyond, -1, margin=0.02, at_least=True).verdict == CONTRADICTED


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_collapse_null_holds_the_level_with_the_verdicts_rule_in_a_family_of_30(n):
    # (b): same mean, one loss collapses by 20 points on 10% of seeds. The paired t alone rejects at 0.05 / 30
    # 2-21x as often as it should; requiring the exact sign-flip test too holds the level (it cannot go below
    # its floor at these seed counts: the rows then say the seeds cannot decide).
    alpha = 0.05 / 30
    sims = 50_000
    error = np.sqrt(alpha * (1 - alpha) / sims)
    t_alone, rule = collapse_level(n, alpha, sims=sims)
    assert t_alone > alpha + 3 * error  # 2.2x, 5.5x, 21x at 3, 5, 10 seeds (200,000 simulations)
    assert rule <= alpha + 2 * error


def test_a_row_is_flat_and_every_column_is_documented():
    row = one(data("a", "b", 0.05)).to_row()
    assert json.loads(json.dumps(row)) == row
    assert all(isinstance(v, str | int | float | bool) or v is None for v in row.values())
    documented = PairVerdict.__doc__
    assert all(key in documented for key in row), [k for k in row if k not in documented]


def test_too_few_seeds_are_refused_not_guessed():
    with pytest.raises(ValueError, match="need 2 a side"):
        pair_verdicts([PairData("a", "b", "AUC", (0.5,), (0.4, 0.6))], "f")
    assert pair_verdicts([], "empty")[1] == []


def test_finding_verdicts():
    better = data("treatment", "control", 0.05)
    assert finding_verdict("claim", better, +1).verdict == DIFFERENT
    contradicted = finding_verdict("claim", better, -1)
    assert contradicted.verdict == CONTRADICTED and contradicted.family_size == 1
    assert contradicted.p_adjusted == contradicted.p_raw  # a single primary test is not adjusted
    unclear = finding_verdict("claim", fixed("t", "c", 0.005, n=3, sd=0.03), +1, margin=0.02)
    assert unclear.verdict == INCONCLUSIVE and unclear.seeds_needed > 3
    with pytest.raises(ValueError, match="expected"):
        finding_verdict("claim", better, 0)


def test_a_precondition_not_met_leaves_the_claim_untested():
    clip = Precondition("share of tokens at the clip bound", measured=0.02, required=0.1)
    v = finding_verdict("cispo speed-up", data("t", "c", 0.05), +1, precondition=clip)
    assert v.verdict == PRECONDITION_ABSENT and v.p_raw is None and v.p_exact is None
    assert (v.precondition, v.precondition_measured, v.precondition_required) == (clip.name, 0.02, 0.1)
    assert v.effect > 0  # the effect stays, as a description
    met = Precondition("collapse of the baseline (entropy below)", measured=0.1, required=0.2, at_least=False)
    assert finding_verdict("dapo", data("t", "c", 0.05), +1, precondition=met).verdict == DIFFERENT


@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_verdicts_t_test_keeps_its_level(n, paired):
    error = 2 * np.sqrt(0.05 * 0.95 / 20_000)
    normal = rejection_rate("normal", n, 0.05, paired)
    assert 0.03 <= normal <= 0.05 + error  # Welch is a little conservative at 3 vs 3 (3.5%)
    for kind in ("lognormal", "beta"):  # skewed scores, both variants alike: conservative (2.0-4.8%)
        assert rejection_rate(kind, n, 0.05, paired) <= 0.05 + error


SWEEPS = 400  # Monte Carlo error of a 5% rate: sqrt(0.05 * 0.95 / 400) = 1.1%


@pytest.mark.slow
def test_identical_variants_are_called_different_in_at_most_5_percent_of_sweeps():
    rate = false_call_rate(SWEEPS, seeds=5)
    assert rate <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / SWEEPS)
    assert false_call_rate(100, seeds=5, method="none", seed=1) > 0.3  # what the old report did: about 50%


@pytest.mark.slow
def test_a_variant_better_by_2_5_sd_is_called_different_at_the_stated_power():
    # At 5 seeds the exact test cannot reach 0.05 / 30: nothing is called, and that is the stated power.
    assert detection_rate(20, 5, shift=2.5) == 0.0
    rate = detection_rate(200, 10, shift=2.5)  # 1000 pairs: MC error at most 1.6%
    predicted = two_sided_power(2.5 * np.sqrt(10 / 2), 2 * 10 - 2, 0.05 / 30)  # pooled t, Bonferroni
    assert rate >= 0.85 and abs(rate - predicted) < 0.1  # 95.1% predicted for the t alone
