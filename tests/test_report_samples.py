"""The report reads samples.jsonl: the checks about completions quote the run's own, the page shows a few
per variant at the start and the end of training, escaped; a torn line is a data problem, said."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from test_report import md_section, sweep  # noqa: F401  (the fixture)
from test_report_checks import DEFAULT_CONFIG, STEPS, default_like, series

from twinkle_exp import metric_names as M
from twinkle_exp.report.__main__ import main
from twinkle_exp.report.diagnostics.sweep import DiagnosticResult
from twinkle_exp.report.loading.runs import load_runs
from twinkle_exp.report.rendering.tables import diagnostic_items
from twinkle_exp.summary.diagnostics.per_run import diagnose_run
from twinkle_exp.tracking.samples_file import SAMPLES_JSONL


def sample(step: int, rollout: int, completion: str, *, truncated=False, repeats=False, row=0) -> dict:
    return {
        "step": step,
        "rollout": rollout,
        "row": row,
        "prompt": f"{row // 4}+30=",  # groups of 4
        "completion": completion,
        "answer": "42",
        "reward": 0.5,
        "rewards": {"exact": 0.0, "format": 0.5},
        "advantage": 0.25,
        "length": 12,
        "truncated": truncated,
        "repeats_prompt": repeats,
    }


def write_samples(job: Path, rows: list[dict], tail: str = "") -> None:
    (job / SAMPLES_JSONL).write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


def truncating_run() -> dict:
    metrics = default_like()
    t = np.linspace(0, 1, len(STEPS))
    metrics[M.COMPLETION_CLIPPED_RATIO] = series(np.where(t < 0.1, 0.4, 0.95))
    return metrics


def test_the_truncation_check_quotes_the_latest_cut_off_completions():
    samples = [
        sample(4, 0, "42"),
        sample(8, 1, "12+30=12+30=12", truncated=True),
        sample(12, 2, "line one\nline `two`", truncated=True),
        sample(16, 3, "x" * 500, truncated=True),
    ]
    config = {**DEFAULT_CONFIG, "rollout": {"group_size": 8, "max_new_tokens": 12}}
    [finding] = [d for d in diagnose_run(truncating_run(), {}, config, samples) if d.quotes]
    assert finding.diagnostic == "truncated_reward_rise"
    assert finding.quotes[0] == "step 12: \"line one⏎line 'two'\" (reward 0.5)"
    assert finding.quotes[1].startswith('step 16: "xxx') and finding.quotes[1].endswith('…" (reward 0.5)')
    assert len(finding.quotes[1]) < 300
    # The other checks quote nothing; a run without samples has no quotes.
    assert all(not d.quotes for d in diagnose_run(truncating_run(), {}, config) if d)
    result = DiagnosticResult(finding.diagnostic, "reward rising on cut-off completions", finding.advice)
    result.variants, result.seeds = {"loss=grpo": [finding]}, {"loss=grpo": 1}
    [item, _passed] = diagnostic_items([result], [], {})
    assert f"Its completions ({SAMPLES_JSONL}): step 12: " in item
    result.variants = {"loss=grpo": [diagnose_run(truncating_run(), {}, config)[0]]}
    assert f"No such completion in its {SAMPLES_JSONL}" in diagnostic_items([result], [], {})[0]


def test_the_prompt_repeat_check_quotes_completions_that_restate_the_prompt():
    metrics = default_like()
    t = np.linspace(0, 1, len(STEPS))
    metrics[M.COMPLETION_CLIPPED_RATIO] = series(np.full(len(STEPS), 0.1))
    metrics[M.COMPLETION_REPEATS_PROMPT_RATIO] = series(np.where(t < 0.3, 0.2, 0.8))
    samples = [sample(8, 1, "12+30= is 42", repeats=True), sample(12, 2, "42")]
    [finding] = diagnose_run(metrics, {}, DEFAULT_CONFIG, samples)
    assert finding.diagnostic == "repeated_prompt_reward_rise"
    assert finding.quotes == ('step 8: "12+30= is 42" (reward 0.5)',)


def test_the_page_shows_each_variants_first_and_last_completions_escaped(sweep):  # noqa: F811
    job = sweep / "grpo" / "seed=0"
    write_samples(
        job,
        [
            sample(4, 0, "<script>alert(1)</script>", row=0),
            sample(4, 0, "first | b", row=4),
            sample(4, 0, "another of the first group", row=5),
            sample(4, 0, "third of the first", row=8),
            sample(8, 1, "middle"),
            sample(10, 2, "the end & <b>bold</b>", truncated=True),
        ],
        tail='{"step": 12, "rollout": 3, "comp',  # killed mid-write
    )
    assert main([str(sweep), "--threshold", "0.5"]) == 0
    out = sweep / "report"
    page = (out / "report.html").read_text()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "the end &amp; &lt;b&gt;bold&lt;/b&gt; (cut off)" in page
    text = (out / "report.md").read_text()
    completions = md_section(text, "Completions")
    assert "first \\| b" in completions and "third of the first" not in completions  # two per end
    assert "another of the first group" not in completions  # one per prompt
    assert "middle" not in completions
    assert f"grpo/seed=0: {SAMPLES_JSONL}: skipped 1 unreadable line(s) (line 7" in text
    [run] = [r for r in load_runs([sweep]) if r.name == "grpo/seed=0"]
    assert [s["rollout"] for s in run.samples] == [0, 0, 0, 0, 1, 2]


def test_a_sweep_without_samples_says_so(sweep):  # noqa: F811
    assert main([str(sweep), "--threshold", "0.5"]) == 0
    completions = md_section((sweep / "report" / "report.md").read_text(), "Completions")
    assert "No run kept completions" in completions


def test_the_page_opens_with_the_headline_and_the_verdicts_in_words(sweep):  # noqa: F811
    assert main([str(sweep), "--threshold", "0.5"]) == 0
    text = (sweep / "report" / "report.md").read_text()
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert headings[:3] == ["Variants", "Verdicts", "Data problems"]
    assert headings.index("Pairwise comparisons: AUC") > headings.index("Verdicts")
    assert headings[-3:-1] == ["How the tables are computed", "Jobs"]  # then "Jobs and attempts"
    top = text.split("## Variants", 1)[0]
    # grpo's AUC 37.9%, sapo's 21.7% (test_report's figures), highest first
    assert (
        "Headline: AUC, mean over seeds, highest first: loss=grpo 37.9% (2 seeds), loss=sapo, loss.tau=0.5 21.7% (2 seeds)."
        in top
    )
    assert (
        "⚠ Read with care: 1 data problem(s) and 1 provenance warning(s), listed below the verdicts." in top
    )
    verdicts = md_section(text, "Verdicts")
    assert verdicts.count("\n- ") + verdicts.startswith("- ") == 2  # one pair x (AUC, final accuracy)
    assert "on final accuracy: inconclusive: difference +22.5" in verdicts


def test_the_end_of_run_summary_quotes_the_runs_cut_off_completions(tmp_path):
    import io

    from rich.console import Console

    from twinkle_exp.summary.run_summary import WARNINGS, print_warnings, summarize_run

    steps = range(4, 101, 4)
    lines = [f"step,{M.COMPLETION_CLIPPED_RATIO},{M.REWARD_MEAN}"]
    lines += [f"{s},0.9,{0.1 + 0.5 * s / 100}" for s in steps]
    (tmp_path / "metrics.csv").write_text("\n".join(lines) + "\n")
    write_samples(tmp_path, [sample(96, 23, "12+30=12+30=[x]", truncated=True)])
    config = {"rollout": {"max_new_tokens": 12}}
    summary = summarize_run(tmp_path / "metrics.csv", config, None, loggers=[])
    [warning] = [w for w in summary[WARNINGS] if w["check"] == "truncated_reward_rise"]
    assert warning["quotes"] == ['step 96: "12+30=12+30=[x]" (reward 0.5)']
    out = io.StringIO()
    print_warnings(summary, Console(file=out, width=200))
    assert '  step 96: "12+30=12+30=[x]" (reward 0.5)' in out.getvalue()  # [x] is not rich markup
