"""The family a report tests and its adjusted p-values (report.statistics.multiplicity), against values
computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from twinkle_exp.report.statistics.multiplicity import Family, adjust

P = [0.01, 0.04, 0.03, 0.005]


def test_holm_by_hand():
    # sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 = 0.04 -> running max 0.06
    assert adjust(P, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_caps_at_one_and_keeps_order():
    assert adjust([0.5, 0.2, 0.9], "holm") == pytest.approx([1.0, 0.6, 1.0])


def test_benjamini_hochberg_by_hand():
    # sorted: 0.005 x4/1 = 0.02, 0.01 x4/2 = 0.02, 0.03 x4/3 = 0.04, 0.04 x4/4 = 0.04; min from the top down
    assert adjust(P, "bh") == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert adjust([0.01, 0.02, 0.5], "bh") == pytest.approx([0.03, 0.03, 0.5])


def test_a_family_of_one_and_no_adjustment_leave_p_unchanged():
    assert adjust([0.03], "holm") == pytest.approx([0.03])
    assert adjust(P, "none") == pytest.approx(P)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="unknown adjustment"):
        adjust(P, "bonferroni-ish")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        adjust([0.1, float("nan")])
    with pytest.raises(ValueError, match="twice"):
        Family("f", (("a", "b", "AUC"), ("a", "b", "AUC")))


def test_a_family_names_what_it_contains():
    pairs = [(f"v{i}", f"v{j}") for i in range(6) for j in range(i + 1, 6)]
    family = Family.of("six_losses", pairs, ["AUC", "final accuracy"])
    assert family.size == 30 and len(family.pairs) == 15 and family.scores == ("AUC", "final accuracy")
    assert family.describe() == "six_losses: 15 pairs x 2 scores = 30 tests, Holm"
    assert family.per_test_alpha(0.05) == pytest.approx(0.05 / 30)
    partial = Family("sweep", family.members[:-1], "bh")
    assert partial.describe() == "sweep: 29 tests over 15 pairs and 2 scores, Benjamini-Hochberg"
    assert "not adjusted" in Family("claim", (("grpo", "drgrpo", "length"),)).describe()


def test_the_family_adjusts_exactly_its_members():
    family = Family.of("f", [("a", "b"), ("a", "c")], ["AUC", "final accuracy"])
    assert family.adjust(P) == pytest.approx(adjust(P, "holm"))
    with pytest.raises(ValueError, match="4 tests, got 3"):
        family.adjust(P[:3])


def test_holm_holds_the_family_wise_error_of_independent_nulls():
    rng = np.random.default_rng(0)
    p = rng.uniform(size=(4000, 30))
    any_holm = np.mean([np.any(adjust(row, "holm") < 0.05) for row in p])
    any_raw = np.mean(np.any(p < 0.05, axis=1))
    assert any_holm <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 4000)
    assert any_raw > 0.7  # 1 - 0.95^30 = 0.79 without adjustment
