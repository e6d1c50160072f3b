"""The regimes table (report/regimes.py): each regime's verdicts.csv read as its report wrote it, pairs
matched across regimes whichever way round a report ordered them, a pair whose verdict changes marked, and
bad input refused by name with nothing written."""

from __future__ import annotations

import csv

import pytest

from twinkle_exp.report import regimes
from twinkle_exp.report.rendering.verdicts_file import COLUMNS, CSV_NAME
from twinkle_exp.report.statistics.aggregate import AUC, FINAL_ACCURACY


def _report(tmp_path, name: str, pairs: list[dict]) -> str:
    out = tmp_path / name
    out.mkdir()
    with (out / CSV_NAME).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for p in pairs:
            row = dict.fromkeys(COLUMNS, "")
            row.update(family="f", family_size=2, adjustment="holm", score=AUC.name, n_first=10, n_second=10,
                       paired=True, test="paired t", confidence=0.95, alpha=0.05)  # fmt: skip
            row.update(p)
            writer.writerow(row)
    return f"{name}={out}"


def _pair(first, second, effect, low, high, p, verdict, mde, score=AUC.name):
    return dict(first=first, second=second, effect=effect, low=low, high=high, p_adjusted=p, verdict=verdict,
                mde=mde, score=score)  # fmt: skip


def test_a_pair_is_matched_across_regimes_and_a_changed_verdict_is_marked(tmp_path, capsys):
    default = _report(tmp_path, "default", [
        _pair("loss=grpo", "loss=gspo", 0.004, -0.01, 0.018, 0.6, "inconclusive", 0.021),
        _pair("loss=grpo", "loss=cispo", 0.001, -0.004, 0.006, 0.9, "equivalent", 0.008),
        _pair("loss=grpo", "loss=gspo", 0.2, 0.1, 0.3, 0.5, "inconclusive", 0.3, score=FINAL_ACCURACY.name),
    ])  # fmt: skip
    stale = _report(tmp_path, "stale", [
        _pair("loss=gspo", "loss=grpo", -0.05, -0.07, -0.03, 0.001, "different", 0.02),  # the other way round
        _pair("loss=grpo", "loss=cispo", 0.002, -0.003, 0.007, 0.8, "equivalent", 0.009),
    ])  # fmt: skip
    out = tmp_path / "regimes.md"
    assert regimes.main([default, stale, "--out", str(out)]) == 0
    text = out.read_text()
    assert text.strip() == capsys.readouterr().out.strip()
    gspo = next(line for line in text.splitlines() if line.startswith("| loss=grpo - loss=gspo"))
    assert "+0.40 [-1.00, +1.80], p_adj 0.6, **inconclusive** (MDE 2.10, n=10)" in gspo
    assert "+5.00 [+3.00, +7.00], p_adj 0.001, **different**" in gspo  # sign turned to grpo - gspo
    assert gspo.rstrip().endswith("| yes |")
    cispo = next(line for line in text.splitlines() if line.startswith("| loss=grpo - loss=cispo"))
    assert cispo.rstrip().endswith("|  |")
    assert "default: 2 tests; stale: 2 tests" in text


def test_a_missing_report_a_score_no_pair_has_and_a_repeated_name_are_refused(tmp_path, capsys):
    out = tmp_path / "regimes.md"
    assert regimes.main([f"x={tmp_path / 'nowhere'}", "--out", str(out)]) == 2
    assert "verdicts.csv: no such file" in capsys.readouterr().err
    one = _report(tmp_path, "one", [_pair("a", "b", 0.0, -0.1, 0.1, 1.0, "inconclusive", 0.2)])
    assert regimes.main([one, "--score", "steps", "--out", str(out)]) == 2
    assert "no pair of score 'steps'" in capsys.readouterr().err
    assert regimes.main([one, one, "--out", str(out)]) == 2
    assert "given twice" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(SystemExit):
        regimes.main(["no-equals-sign"])


def test_a_regime_separates_a_pair_only_by_a_test_of_the_difference_of_differences(tmp_path, capsys):
    from scipy import stats

    default = _report(tmp_path, "default", [
        _pair("loss=grpo", "loss=gspo", 0.004, -0.01, 0.018, 0.6, "inconclusive", 0.021),
        _pair("loss=grpo", "loss=cispo", 0.010, -0.001, 0.021, 0.09, "inconclusive", 0.015),
    ])  # fmt: skip
    stale = _report(tmp_path, "stale", [
        _pair("loss=gspo", "loss=grpo", -0.05, -0.07, -0.03, 0.001, "different", 0.02),
        # crosses alpha (inconclusive -> different) with almost the same effect: not a separation
        _pair("loss=grpo", "loss=cispo", 0.012, 0.002, 0.022, 0.03, "different", 0.015),
    ])  # fmt: skip
    assert regimes.main([default, stale]) == 0
    text = capsys.readouterr().out
    found = regimes.interactions(
        {n: regimes.read_regime(tmp_path / n, AUC.name) for n in ("default", "stale")}
    )
    gspo, cispo = found
    # grpo - gspo: 0.05 - 0.004 = 0.046; each standard error is the half-width over t(0.975, 9) (n = 10, paired);
    # they add in quadrature, with Welch-Satterthwaite degrees of freedom, and the two tests are one Holm family
    t9 = stats.t.ppf(0.975, 9)
    se0, se1 = 0.014 / t9, 0.02 / t9
    df = (se0**2 + se1**2) ** 2 / (se0**4 / 9 + se1**4 / 9)
    p = 2 * stats.t.sf(0.046 / (se0**2 + se1**2) ** 0.5, df)
    assert gspo.effect == pytest.approx(0.046) and gspo.df == pytest.approx(df)
    assert gspo.p_raw == pytest.approx(p) and gspo.p_adjusted == pytest.approx(2 * p)
    assert gspo.verdict == "separates" and gspo.p_adjusted < 0.05
    assert cispo.effect == pytest.approx(0.002) and cispo.verdict == "not shown to separate"
    assert cispo.p_adjusted == pytest.approx(cispo.p_raw)  # Holm: the larger p keeps its own, > 2 x the first
    assert "one family of 2 tests, Holm-adjusted" in text
    assert "| loss=grpo - loss=cispo | stale | +0.20 [" in text and "**not shown to separate** |" in text
