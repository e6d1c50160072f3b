"""`python -m twinkle_exp.report DIR [DIR ...] [--group-by KEYS] [--score KEY] [--threshold 0.5] [--out OUT]
[--strict]`: the comparison report of one or more sweeps."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .aggregate import DEFAULT_SCORES, group_by_variant, metric_score, summarize
from .attempts import HEADERS as ATTEMPT_HEADERS
from .attempts import attempt_rows, render_attempts_markdown
from .checks_sweep import identical_variants, sweep_checks
from .checks_variants import variant_checks
from .compare import compare_all
from .grouping import GroupByError, assign_groups, flag_repeated_seeds, parse_group_by
from .plots import legend_labels, plot_all, variant_colors
from .plots_intervals import TITLE as INTERVALS_TITLE
from .plots_intervals import plot_intervals
from .render import ReportData, build_blocks, to_html, to_markdown
from .runs import load_runs
from .speed import threshold_ratios
from .tables import check_items, problem_items, status_summary, variant_row

EXIT_NO_RUNS = 2  # also: a usage error (argparse's own code)
EXIT_DATA_PROBLEMS = 3  # with --strict: the report was written, but some files could not be read in full


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line as a Namespace: dirs [Path], group_by [str] | None, score [str], threshold, out, strict."""
    parser = argparse.ArgumentParser(
        prog="twinkle-report",
        description="Compare the variants of one or more sweeps: interval estimates over seeds, pairwise "
        "comparisons, checks for known traps, plots; as Markdown and HTML.",
    )
    parser.add_argument(
        "dirs", type=Path, nargs="+", help="Hydra multirun directories or single run directories, any mix"
    )
    parser.add_argument(
        "--group-by",
        default=None,
        help="comma-separated config keys that make a variant, e.g. 'loss,loss.tau' "
        "(default: each job's overrides less the seed)",
    )
    parser.add_argument(
        "--score",
        action="append",
        default=[],
        metavar="KEY",
        help="also compare the variants on this metric (its mean over the last quarter of each run's logged "
        "steps), e.g. train/entropy; repeatable",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=0.5,
        help="validation accuracy, as a fraction in [0, 1], for the steps-to-threshold column (default 0.5)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default: <DIR>/report; required with several)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help=f"exit with status {EXIT_DATA_PROBLEMS} if any file is unreadable",
    )
    args = parser.parse_args(argv)
    if not 0.0 <= args.threshold <= 1.0:
        parser.error(f"--threshold is a fraction in [0, 1], got {args.threshold}")
    if args.out is None and len(args.dirs) > 1:
        parser.error("--out is required when several directories are compared")
    try:
        args.group_by = parse_group_by(args.group_by) if args.group_by is not None else None
    except GroupByError as exc:
        parser.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the report; returns the exit status (0, EXIT_NO_RUNS on a usage error or no runs, EXIT_DATA_PROBLEMS)."""
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # --help or a usage error: argparse printed it; return its code like any other
        return int(exc.code or 0)
    out_dir: Path = args.out if args.out is not None else args.dirs[0] / "report"

    # Checked before anything is created, so a typo in a path leaves no stray report folder behind.
    missing = [d for d in args.dirs if not d.is_dir()]
    if missing:
        print(f"twinkle-report: no runs found under {missing[0]} (no such directory)", file=sys.stderr)
        return EXIT_NO_RUNS
    runs = load_runs(args.dirs, skip=out_dir)
    if not runs:
        where = ", ".join(str(d) for d in args.dirs)
        print(
            f"twinkle-report: no runs found under {where} (no directory holding .hydra/overrides.yaml or run.json)",
            file=sys.stderr,
        )
        return EXIT_NO_RUNS
    if args.group_by is not None:
        try:
            assign_groups(runs, args.group_by)
        except GroupByError as exc:
            print(f"twinkle-report: {exc}", file=sys.stderr)
            return EXIT_NO_RUNS

    variants = group_by_variant(runs)
    flag_repeated_seeds(variants)
    names, shared = legend_labels(variants)
    scores = DEFAULT_SCORES + tuple(metric_score(key) for key in args.score)
    unlogged = [key for key in args.score if not any(key in run.metrics for run in runs)]
    if unlogged:
        print(f"twinkle-report: --score {unlogged[0]}: no run logged this metric", file=sys.stderr)
        return EXIT_NO_RUNS
    stats = summarize(runs, args.threshold, scores)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = {spec.title: (spec.key, path) for spec, path in plot_all(variants, out_dir).items()}
    intervals = plot_intervals(stats, scores, names, variant_colors(variants), out_dir)
    plots[INTERVALS_TITLE] = ("val/accuracy (finished runs)", intervals)
    data = ReportData(
        dirs=[d.resolve() for d in args.dirs],
        runs=runs,
        stats=stats,
        scores=scores,
        comparisons=compare_all(stats, scores, names),
        checks=sweep_checks(variants) + variant_checks(variants),
        identical=identical_variants(variants),
        names=names,
        shared=shared,
        threshold=args.threshold,
        plots=plots,
        speed=threshold_ratios(stats, names),
    )
    blocks = build_blocks(data)
    markdown, page = out_dir / "report.md", out_dir / "report.html"
    markdown.write_text(to_markdown(blocks) + render_attempts_markdown(runs), encoding="utf-8")
    page.write_text(to_html(blocks), encoding="utf-8")
    print_terminal(data, [markdown, page, *(p for _, p in plots.values() if p is not None)])
    problems = problem_items(runs)
    return EXIT_DATA_PROBLEMS if args.strict and problems else 0


def print_terminal(d: ReportData, written: list[Path]) -> None:
    """The variant table, the first score's sentences, the checks, data problems (on stderr), the files."""
    console, errors = Console(), Console(stderr=True)
    title = ", ".join(str(p) for p in d.dirs)
    table = Table(
        title=f"{title} ({status_summary(d.runs)})" + (f"\nall variants: {d.shared}" if d.shared else "")
    )
    # Shorter headers than the files', and no IQM/KL columns, so that an 80-column terminal has room.
    for header in (
        "variant",
        "finished",
        "AUC % [95% CI]",
        "final acc. % [95% CI]",
        f"≥{d.threshold:.0%} at",
        "wall",
    ):
        table.add_column(header, overflow="fold")  # labels are long override lists: wrap them, never cut them
    for s in d.stats:
        row = variant_row(s, d.scores[:2], d.names.get(s.label))
        table.add_row(row[0], row[1], row[2], row[4], row[6], row[8])
    console.print(table)
    jobs = Table(title="jobs and attempts")
    for header in ATTEMPT_HEADERS:
        jobs.add_column(header, overflow="fold")
    for row in attempt_rows(d.runs):
        jobs.add_row(*row)
    console.print(jobs)
    for c in d.comparisons:
        if c.score is d.scores[0] or c.score not in DEFAULT_SCORES:  # the headline (AUC), and any --score
            console.print(c.sentence, highlight=False)
    for item in check_items(d.checks, d.identical, d.names):
        console.print(item, style="yellow" if item.startswith("⚠") else None, highlight=False)
    for title, (key, path) in d.plots.items():
        if path is None:
            console.print(f"skipped {title}: no run logged {key}", style="yellow")
    for problem in problem_items(d.runs):
        errors.print(f"data problem: {problem}", style="bold red", highlight=False, soft_wrap=True)
    for path in written:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)


if __name__ == "__main__":
    sys.exit(main())
