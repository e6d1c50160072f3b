"""The report's rows and sentences as plain strings, shared by the terminal, report.md and report.html."""

from __future__ import annotations

from collections import Counter

from ..diagnostics.sweep import RTOL, DiagnosticResult
from ..loading.runs import Run
from ..statistics.aggregate import Score, VariantStats
from ..statistics.compare import Comparison, difference
from ..statistics.estimates import N_RESAMPLES, Estimate
from ..statistics.intervals import CONFIDENCE
from ..statistics.power import MAX_SEEDS

NONE = "–"
METHOD_NOTES = (
    "Table: finished runs only; AUC (the headline score) = area under val/accuracy against the optimizer step "
    "divided by the run's first..last validation span (the mean accuracy over training); final = a run's last "
    "val/accuracy, which saturates when every variant reaches the task's ceiling within the budget.",
    f"Intervals: {CONFIDENCE:.0%} percentile bootstrap over seeds (scipy.stats.bootstrap, {N_RESAMPLES:,} "
    "resamples, fixed seed); in comparisons each variant's seeds are resampled separately (stratified) and "
    "seeds are not paired by number. IQM = interquartile mean (mean of the middle 50%); with fewer than 4 "
    "seeds nothing is trimmed and it equals the mean.",
    "With few seeds the bootstrap interval is too narrow: with 2 or 3 seeds it is the seeds' min..max, which "
    "holds the true mean 50% of the time with 2 seeds and 75% with 3; with 10 seeds about 90% (measured on "
    "normal data). Read it as the range of what was seen, not as 95% confidence.",
    "Comparisons: P(improvement) = probability that a seed of the first variant beats a seed of the second "
    "(ties count half). A difference is called only when the bootstrap intervals of the difference (excludes "
    "0) and of P(improvement) (excludes 0.5) agree with an exact permutation test (p < 0.05); with 3 vs 3 "
    "seeds that test cannot go below p = 0.1. Seeds needed: two-sided t-test at 5%, 80% power, taking the "
    "observed difference and pooled spread as true: a rough guide.",
    "Steps to threshold: first optimizer step with val/accuracy ≥ threshold, mean over the finished runs that "
    "reached it, with how many reached it out of those that logged a validation accuracy.",
    "Curves: every run that logged the metric, running and failed ones up to their last logged step; seeds "
    "logged at different steps are aligned by forward-filling each run's last value within its own logged "
    "range. Band: the same bootstrap interval of the mean at each step (none where fewer than 2 seeds logged).",
)


def estimate(e: Estimate | None, scale: float = 100.0) -> str:
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
        columns += [f"{score.name}{unit} mean [95% CI]", f"{score.name} IQM [95% CI]"]
    return [
        "variant",
        "seeds finished / total",
        *columns,
        f"steps to ≥ {threshold * 100:g}% acc. (reached)",
        "final KL",
        "mean wall time",
    ]


def variant_row(s: VariantStats, scores: tuple[Score, ...], name: str | None = None) -> list[str]:
    """One variant's row under `variant_headers`; `name` replaces the label (shared overrides left out)."""
    reached = len(s.steps_to_threshold)
    if s.evaluated == 0:
        steps = NONE
    elif reached == 0:
        steps = f"not reached (0/{s.evaluated})"
    else:
        steps = f"{s.steps_to_threshold_mean:.1f} ({reached}/{s.evaluated})"
    columns = [
        estimate(s.estimates.get(f"{sc.name}/{st}"), sc.scale) for sc in scores for st in ("mean", "iqm")
    ]
    return [
        name or s.label,
        f"{s.num_finished}/{s.num_total}",
        *columns,
        steps,
        NONE if s.kl_mean is None else f"{s.kl_mean:.4g}",
        format_duration(s.wall_time_mean),
    ]


PAIR_HEADERS = ["pair", "P(improvement) [95% CI]", "difference of means [95% CI]", "permutation p", "verdict"]


def pair_row(c: Comparison) -> list[str]:
    """One comparison under PAIR_HEADERS; differences of scores in % are in percentage points."""
    if c.prob_improvement is None:
        return [f"{c.first} vs {c.second}", NONE, NONE, NONE, c.verdict]
    p, d = c.prob_improvement, c.difference
    if c.seeds_needed is None:
        verdict = c.verdict
    elif c.seeds_needed > MAX_SEEDS:
        verdict = f"{c.verdict}; > {MAX_SEEDS} seeds needed"
    else:
        verdict = f"{c.verdict}; ~{c.seeds_needed} seeds needed"
    return [
        f"{c.first} vs {c.second}",
        f"{p.value:.2f} [{p.low:.2f}, {p.high:.2f}]",
        difference(d, c.score),
        f"{c.p_value:.3f}",
        verdict,
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
            f"{diagnoses[0].evidence}. → {r.advice}."
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
