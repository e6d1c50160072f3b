"""`python -m twinkle_exp.report.suite DIR [DIR ...] --out OUT`: a comparison over a suite of tasks.

The runs of one or more sweeps (losses x tasks x warm-starts x seeds: `conf/sweep/suite.yaml`, and any
preset run beside it, e.g. `+experiment=long_completions`, `+experiment=smollm2_addition`) are grouped by
task (the run's `task` config group, else its task config's `_target_`) and by variant (its overrides less
seed, warmup.seed and the task's). Per task: the report's verdicts on final greedy accuracy (the family of
that task, with the warm-start design where the runs span several). Across tasks, as rliable does
(`statistics.suite`): each run's final accuracy normalised to its task (0 at the task's warm-start, its
runs' mean first validation, per warm-start; 1 at every prompt right), per variant the IQM, mean and optimality gap with
rescaled stratified bootstrap intervals, per pair the average probability of improvement with its interval,
and performance profiles (a plot). Writes OUT/suite.md and OUT/performance_profiles.png.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from itertools import combinations
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from twinkle_exp import metric_names as M
from twinkle_exp.tracking.run_json import override_key

from .loading.grouping import config_value
from .loading.runs import Run, load_runs
from .statistics.aggregate import FINAL_ACCURACY, summarize
from .statistics.comparisons import FAMILY, compare_all, sentence
from .statistics.suite import aggregate, average_probability_of_improvement, normalise, performance_profile
from .statistics.warm_start_design import compare_across, design_of, pooled_names
from .statistics.warm_starts import WARMUP_SEED, warm_start_of

SCORES = (FINAL_ACCURACY,)
TAUS = np.linspace(-0.25, 1.0, 126)


def task_of(run: Run) -> str:
    """The run's task: its `task` config group's option, else its task config's `_target_`, else "task"."""
    choice = config_value(run, "task")
    if isinstance(choice, str):
        return choice
    target = config_value(run, "task._target_")
    return target.rsplit(".", 1)[-1] if isinstance(target, str) else "task"


def suite_label(run: Run) -> str:
    """The variant across tasks: its overrides less seed, warmup.seed and whatever names the task."""
    task_keys = {"task", "+experiment", "experiment", WARMUP_SEED}
    kept = [
        o
        for o in run.variant_overrides
        if override_key(o) not in task_keys and not override_key(o).startswith("task.")
    ]
    return ", ".join(kept) or "default"


def by_task(runs: list[Run]) -> dict[str, list[Run]]:
    tasks: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        if run.finished and run.metrics.get(M.VAL_ACCURACY):
            tasks[task_of(run)].append(run)
    return dict(sorted(tasks.items()))


def task_verdicts(runs: list[Run]) -> list[str]:
    """The report's verdicts on one task's runs (final accuracy), across warm-starts where they span several."""
    for run in runs:  # the variant within the task: its suite label (and warm-start, kept for the design)
        warm = [o for o in run.overrides if override_key(o) == WARMUP_SEED]
        run.group = [suite_label(run)] + warm
    stats = summarize(runs, 0.5, SCORES)
    names = {s.label: s.label for s in stats}
    design = design_of(stats)
    if design is None:
        comparisons = compare_all(stats, SCORES, names)
    else:
        comparisons = compare_across(design, SCORES, pooled_names(stats, names), family_name=FAMILY)
    return [sentence(v, FINAL_ACCURACY) for v in comparisons.verdicts] + comparisons.untested


def normalised_scores(
    tasks: dict[str, list[Run]],
) -> tuple[dict[str, dict[str, list[float]]], dict[str, float]]:
    """{variant: {task: normalised final accuracy per run}} and {task: its warm-start accuracy}."""
    scores: dict[str, dict[str, list[float]]] = defaultdict(dict)
    warm_starts = {}
    for task, runs in tasks.items():
        warm_starts[task] = float(np.mean([r.metrics[M.VAL_ACCURACY][0][1] for r in runs]))
        # Each warm-start checkpoint is its own 0: a run's gain is over the checkpoint it started from.
        levels: dict[str | None, list[Run]] = defaultdict(list)
        for run in runs:
            levels[warm_start_of(run)].append(run)
        for members in levels.values():
            start = float(np.mean([r.metrics[M.VAL_ACCURACY][0][1] for r in members]))
            for run in members:
                value = normalise([run.metrics[M.VAL_ACCURACY][-1][1]], start)[0]
                scores[suite_label(run)].setdefault(task, []).append(float(value))
    return dict(sorted(scores.items())), warm_starts


def _fmt(e) -> str:
    return f"{e.value:.3f} [{e.low:.3f}, {e.high:.3f}]"


def render(tasks: dict[str, list[Run]], out: Path) -> str:
    scores, warm_starts = normalised_scores(tasks)
    complete = {v: s for v, s in scores.items() if set(s) == set(tasks)}
    lines = [
        "# Suite report",
        "",
        f"{len(tasks)} tasks: "
        + ", ".join(f"{t} ({len(r)} runs, warm-start {100 * warm_starts[t]:.1f}%)" for t, r in tasks.items())
        + ".",
        "",
        "## Per-task verdicts (final greedy accuracy)",
        "",
    ]
    for task, runs in tasks.items():
        lines += [f"### {task}", ""] + [f"- {s}" for s in task_verdicts(runs)] + [""]
    lines += [
        "## Across tasks (normalised: 0 at the task's warm-start, 1 at every prompt right)",
        "",
        "Rescaled stratified bootstrap intervals (runs resampled within each task), 95%; "
        "docs/statistics.md has their measured coverage.",
        "",
        "| variant | tasks | runs | IQM | mean | optimality gap |",
        "|---|---|---|---|---|---|",
    ]
    for variant, per_task in complete.items():
        agg = aggregate(list(per_task.values()))
        runs = sum(map(len, per_task.values()))
        lines.append(
            f"| {variant} | {len(per_task)} | {runs} | {_fmt(agg['IQM'])} | {_fmt(agg['mean'])} | {_fmt(agg['optimality gap'])} |"
        )
    skipped = sorted(set(scores) - set(complete))
    if skipped:
        lines += ["", f"Left out of the aggregate (not run on every task): {', '.join(skipped)}."]
    lines += [
        "",
        "Average probability of improvement (a run of the first beats a run of the second on a task, averaged over tasks):",
        "",
    ]
    for a, b in combinations(complete, 2):
        tasks_ab = sorted(complete[a])
        p = average_probability_of_improvement(
            [complete[a][t] for t in tasks_ab], [complete[b][t] for t in tasks_ab]
        )
        lines.append(f"- {a} over {b}: {_fmt(p)}")
    figure = Figure(figsize=(7, 4.5))
    axes = figure.add_subplot()
    for variant, per_task in complete.items():
        axes.plot(TAUS, performance_profile(list(per_task.values()), TAUS), label=variant)
    axes.set_xlabel("normalised final accuracy tau")
    axes.set_ylabel("share of runs above tau (tasks weighted equally)")
    axes.set_title("Performance profiles")
    if complete:
        axes.legend(fontsize=8)
    figure.savefig(out / "performance_profiles.png", dpi=100)
    lines += ["", "![performance profiles](performance_profiles.png)", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="twinkle-suite", description=__doc__.splitlines()[0])
    parser.add_argument("dirs", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    missing = [d for d in args.dirs if not d.is_dir()]
    if missing:
        print(f"twinkle-suite: no such directory: {missing[0]}", file=sys.stderr)
        return 2
    tasks = by_task(load_runs(args.dirs, skip=args.out))
    if not tasks:
        print("twinkle-suite: no finished run with val/accuracy under the given directories", file=sys.stderr)
        return 2
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        text = render(tasks, args.out)
    except ValueError as exc:
        print(f"twinkle-suite: {exc}", file=sys.stderr)
        return 2
    (args.out / "suite.md").write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {args.out / 'suite.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
