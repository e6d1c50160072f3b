"""`python -m twinkle_exp.report DIR [DIR ...] [--group-by KEYS] [--score KEY] [--threshold 0.5] [--out OUT]
[--strict]`: the comparison report of one or more sweeps."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .loading.grouping import GroupByError, parse_group_by
from .pipeline import Refusal, group, load, plot, render, summarize
from .rendering.tables import problem_items
from .rendering.terminal import print_terminal
from .statistics.aggregate import DEFAULT_THRESHOLD

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
        default=DEFAULT_THRESHOLD,
        help="validation accuracy, as a fraction in [0, 1], for the steps-to-threshold column "
        f"(default {DEFAULT_THRESHOLD:g})",
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
    try:
        runs = load(args.dirs, out_dir)
        variants = group(runs, args.group_by)
        data = summarize(args.dirs, runs, variants, args.score, args.threshold)
    except Refusal as exc:
        print(f"twinkle-report: {exc}", file=sys.stderr)
        return EXIT_NO_RUNS
    data.plots = plot(variants, data, out_dir)
    print_terminal(data, render(data, out_dir))
    return EXIT_DATA_PROBLEMS if args.strict and problem_items(runs) else 0


if __name__ == "__main__":
    sys.exit(main())
