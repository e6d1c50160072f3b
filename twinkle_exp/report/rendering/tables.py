"""The report's rows and sentences as plain strings, shared by the terminal, report.md and report.html."""

from __future__ import annotations

from collections import Counter

from twinkle_exp.summary.diagnostics.diagnosis import Diagnosis
from twinkle_exp.summary.diagnostics.quotes import QUOTED_FLAG
from twinkle_exp.tracking.samples_file import SAMPLES_JSONL

from ..diagnostics.sweep import RTOL, DiagnosticResult
from ..loading.runs import Run
from ..statistics.aggregate import Score, VariantStats
from ..statistics.comparisons import interval, points, prob_improvement, verdict_label
from ..statistics.intervals import CONFIDENCE, Interval
from ..statistics.verdicts import PairVerdict

NONE = "–"
METHOD_NOTES = (
    "Table: finished runs only. AUC (the headline score) = the mean of val/accuracy over the span of "
    "optimizer steps every finished run covers, each run's curve interpolated linearly between its "
    "validations onto every step of that span, so how often a run validated does not change it; final = a "
    "run's last val/accuracy, which saturates when every variant reaches the task's ceiling within the budget.",
    f"Intervals: {CONFIDENCE:.0%} Student t interval of the mean over seeds (exact for normal scores at any "
    "number of seeds; a percentile bootstrap holds the mean only 75% / 84% of the time at 3 / 5 seeds). "
    "IQM = interquartile mean (mean of the middle 50%), a point summary; with fewer than 4 seeds it equals "
    "the mean.",
    "Comparisons: every pair on every score is one family of tests, adjusted together (the family, its size "
    "and the adjustment are stated above the pairs). Difference of means with its Welch t interval, or the "
    "paired t interval of per-seed differences where the runs at each seed share what the seed fixes "
    "(prompt and sampler streams, warm-start: run.json's provenance). Verdicts: different (adjusted p < "
    "0.05, the interval excludes 0); equivalent within ±margin (two one-sided tests at the score's margin, "
    "adjusted likewise); else inconclusive, with the smallest difference the seeds detect with 80% power at "
    "the family's level (MDE) and the seeds the margin would need. P(improvement) = probability that a seed "
    "of the first beats one of the second (ties half), with Newcombe's score interval; at 0 or 1 it is at "
    "its bound: read the interval one-sided.",
    "Steps to threshold: restricted mean steps to the threshold within the earliest last validation of the "
    "finished runs (a run that never got there counts as that horizon: censoring-aware, every run counted), "
    "with its interval and how many runs reached it.",
    "Curves: every run that logged the metric, running and failed ones up to their last logged step; seeds "
    "logged at different steps are aligned by forward-filling each run's last value within its own logged "
    "range. Band: the t interval of the mean at each step (none where fewer than 2 seeds logged).",
)


def estimate(e: Interval | None, scale: float = 100.0) -> str:
    """ "74.0 [70.3, 77.7]" (x scale); "60.0 (n=1)" without an interval; NONE when missing."""
    if e is None:
        return NONE
    digits = ".1f" if scale == 100.0 else ".3g"
    if e.low is None:
        return f"{e.value * scale:{digits}} (n={e.n})"
    return f"{e.value * scale:{digits}} [{e.low * scale:{digits}}, {e.high * scale:{digits}}]"


def variant_headers(threshold: float, scores: tuple[Score, ...]) -> list[str]:
    """Columns: variant, seeds, mean and IQM of each score, steps to threshold, KL, wall time."""
    columns = []
    for score in scores:
        unit = f" ({score.unit})" if score.unit else ""
        columns += [f"{score.name}{unit} mean [95% CI]", f"{score.name} IQM"]
    return [
        "variant",
        "seeds finished / total",
        *columns,
        f"steps to ≥ {threshold * 100:g}% acc. [95% CI] (reached)",
        "final KL",
        "mean wall time",
    ]


def threshold_cell(s: VariantStats) -> str:
    """ "62.4 [51.0, 73.8] (3/5 by step 80)": restricted mean steps, interval, runs that reached it."""
    t = s.threshold
    if t is None:
        return NONE
    ci = "" if t.low is None else f" [{t.low:.1f}, {t.high:.1f}]"
    return f"{t.value:.1f}{ci} ({t.reached}/{t.runs} by step {t.horizon:g})"


def variant_row(s: VariantStats, scores: tuple[Score, ...], name: str | None = None) -> list[str]:
    """One variant's row under `variant_headers`; `name` replaces the label (shared overrides left out)."""
    columns = []
    for sc in scores:
        iqm = s.iqm.get(sc.name)
        digits = ".1f" if sc.scale == 100.0 else ".3g"
        columns += [
            estimate(s.estimates.get(sc.name), sc.scale),
            NONE if iqm is None else f"{iqm * sc.scale:{digits}}",
        ]
    return [
        name or s.label,
        f"{s.num_finished}/{s.num_total}",
        *columns,
        threshold_cell(s),
        NONE if s.kl_mean is None else f"{s.kl_mean:.4g}",
        format_duration(s.wall_time_mean),
    ]


PAIR_HEADERS = [
    "pair",
    "test",
    "difference [95% CI]",
    "adjusted p",
    "P(improvement) [95% CI]",
    "margin",
    "TOST adjusted p",
    "MDE (80% power)",
    "verdict",
]


def pair_row(v: PairVerdict, score: Score) -> list[str]:
    """One pair under PAIR_HEADERS; differences of scores in % are in percentage points."""
    return [
        f"{v.first} vs {v.second}",
        f"{v.test}, {v.n_first} vs {v.n_second} seeds",
        interval(v, score),
        f"{v.p_adjusted:.3g}",
        prob_improvement(v),
        NONE if v.margin is None else f"±{points(v.margin, score, signed=False)}",
        NONE if v.p_equivalence_adjusted is None else f"{v.p_equivalence_adjusted:.3g}",
        points(v.mde, score, signed=False),
        verdict_label(v, score),
    ]


def diagnostic_items(
    results: list[DiagnosticResult], identical: list[tuple[list[str], list[int]]], names: dict
) -> list[str]:
    """One paragraph per diagnostic that fired, then one line naming the ones that passed."""
    items, passed = [], []
    for r in results:
        if not r.variants:
            passed.append(r.title)
            continue
        affected = ", ".join(
            f"{names.get(v, v)} ({len(f)} of {r.seeds[v]} {'seed' if r.seeds[v] == 1 else 'seeds'})"
            for v, f in r.variants.items()
        )
        label, diagnoses = next(iter(r.variants.items()))
        items.append(
            f"⚠ {r.title}: {affected}. Evidence ({names.get(label, label)}, first affected seed): "
            f"{diagnoses[0].evidence}. → {r.advice}.{_quoted(r.diagnostic, diagnoses[0])}"
        )
    if identical:
        groups = "; ".join(
            " = ".join(names.get(v, v) for v in labels) + f" ({_seeds(seeds)})" for labels, seeds in identical
        )
        items.append(
            f"⚠ variants with identical curves: {groups}. Their reward, accuracy, length and entropy curves "
            f"agree to a relative {RTOL:g} at every logged step, so they made the same updates and comparing "
            "them says nothing about the losses: see the on-policy and gradient-clipping checks."
        )
    else:
        passed.append("variants with identical curves")
    if passed:
        items.append("✓ passed: " + ", ".join(passed) + ".")
    return items


def _quoted(diagnostic: str, diagnosis: Diagnosis) -> str:
    """ " Its completions (samples.jsonl): …" for a check about completions; what to read when none is kept."""
    if diagnostic not in QUOTED_FLAG:
        return ""
    if not diagnosis.quotes:
        return (
            f" No such completion in its {SAMPLES_JSONL} (none kept, or the file is off): see the run's log."
        )
    return f" Its completions ({SAMPLES_JSONL}): " + "; ".join(diagnosis.quotes) + "."


def _seeds(seeds: list[int]) -> str:
    """ "seed 0" or "seeds 0, 1"."""
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))


STATUS_ORDER = ("finished", "running", "failed", "not started")
JOB_HEADERS = ["job", "variant", "seed", "status", "wall time", "error"]


def job_row(run: Run, variant: str | None = None) -> list[str]:
    """One job under JOB_HEADERS, its error cut to one line of at most 300 characters; `variant` replaces
    the run's variant label (shared overrides left out)."""
    seed = NONE if run.seed is None else str(run.seed)
    error = " ".join(run.error.split())[:300] if run.error else ""  # one line, bounded: tracebacks are long
    return [run.name, variant or run.variant, seed, run.status, format_duration(run.wall_time_s), error]


def problem_items(runs: list[Run]) -> list[str]:
    """ "job: problem" for every problem of every run, in job order."""
    return [f"{run.name}: {problem}" for run in runs for problem in run.problems]


def status_summary(runs: list[Run]) -> str:
    """ "7 jobs: 4 finished, 1 running, ..." in a fixed order of statuses."""
    counts = Counter(run.status for run in runs)
    known = [s for s in STATUS_ORDER if s in counts]
    parts = ", ".join(f"{counts[s]} {s}" for s in known + sorted(set(counts) - set(known)))
    return f"{len(runs)} jobs: {parts}"


def format_duration(seconds: float | None) -> str:
    """ "41.1 s", "1 min 31 s", "2 h 05 min"; NONE for None."""
    if seconds is None:
        return NONE
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
