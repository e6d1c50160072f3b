"""Findings worded as their claims (issue 45, item 7): a claim run where the paper's condition was known
absent says "contradicted in this setting", and a precondition set after the data is marked as such in the
name the page's table shows."""

from __future__ import annotations

import dataclasses

import numpy as np
from test_report_stats import provenance, write_run

from twinkle_exp.report.findings.claims import CLAIMS
from twinkle_exp.report.findings.verdict import decide
from twinkle_exp.report.loading.runs import load_runs
from twinkle_exp.report.statistics.verdicts import CONTRADICTED, CONTRADICTED_IN_SETTING


def test_a_contradiction_where_the_setting_lacks_the_papers_condition_is_marked(tmp_path):
    sweep = tmp_path / "sweep"
    rng = np.random.default_rng(0)
    for seed in range(10):
        for loss, final in (("nsr", 0.0), ("psr", 0.37)):
            curve = [(0, 0.06), (100, float(final + rng.normal(0, 0.02)))]
            write_run(sweep, loss, seed, curve, provenance(seed=seed), key="val/pass@16")
    runs = load_runs([sweep])
    claim = dataclasses.replace(CLAIMS["nsr_passk"], treatment="loss=nsr", control="loss=psr")
    assert claim.setting_lacks
    assert decide(claim, runs).verdict == CONTRADICTED_IN_SETTING
    plain = dataclasses.replace(claim, setting_lacks="")
    assert decide(plain, runs).verdict == CONTRADICTED


def test_post_hoc_preconditions_carry_their_mark_in_the_name_the_table_shows():
    marked = [n.name for c in CLAIMS.values() for n in c.preconditions if "post hoc" in n.name]
    assert len(marked) == 2 and all("set after the data" in name for name in marked)
    assert {c.name for c in CLAIMS.values() if any(n.post_hoc for n in c.preconditions)} == {
        "cispo_speed",
        "dapo_entropy",
    }
