"""`python -m twinkle_exp.report DIR [DIR ...] [--group-by KEYS] [--score KEY] [--threshold 0.5] [--out OUT]
[--adjust holm|bh] [--margin SCORE=VALUE] [--allow-mixed-provenance] [--strict]`: the comparison report of
one or more sweeps."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from twinkle_exp.summary.series import DEFAULT_THRESHOLD

from .loading.grouping import GroupByError, parse_group_by
from .pipeline import Refusal, group, load, plot, render, summarize
from .rendering.tables import problem_items
from .rendering.terminal import print_terminal
from .statistics.equivalence import check_margin

EXIT_NO_RUNS = 2  # also: a usage error (argparse's own code), and runs of mixed provenance
EXIT_DATA_PROBLEMS = 3  # with --strict: the report was written, but some files could not be read in full


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line as a Namespace: dirs [Path], group_by [str] | None, score [str], threshold, out,
    adjust, margin {score: value}, allow_mixed_provenance, strict."""
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
        "--adjust",
        choices=("holm", "bh"),
        default="holm",
        help="how the family of pair tests (every pair on every score) is adjusted: holm (family-wise error, "
        "the default) or bh (Benjamini-Hochberg, false discovery rate)",
    )
    parser.add_argument(
        "--margin",
        action="append",
        default=[],
        metavar="SCORE=VALUE",
        help="equivalence margin of a score in its own units (accuracy as a fraction: 0.02 = 2 points; "
        "defaults: AUC=0.02, 'final accuracy'=0.02; a --score is named by its key); repeatable",
    )
    parser.add_argument(
        "--allow-mixed-provenance",
        action="store_true",
        help="compare runs that differ in commit, threads, CPU, accelerator, BLAS or warm-start (refused "
        "otherwise); the page then warns",
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
    args.margin = dict(parse_margin(parser, text) for text in args.margin)
    return args


def parse_margin(parser: argparse.ArgumentParser, text: str) -> tuple[str, float]:
    """ "AUC=0.03" -> ("AUC", 0.03); a usage error for anything else."""
    name, sep, value = text.rpartition("=")
    try:
        if not sep or not name.strip():
            raise ValueError("expected SCORE=VALUE")
        return name.strip(), check_margin(float(value))
    except ValueError as exc:
        parser.error(f"--margin {text!r}: {exc}")


def main(argv: list[str] | None = None) -> int:
    """Run the report; returns the exit status (0; EXIT_NO_RUNS on a usage error, no runs or runs of mixed
    provenance; EXIT_DATA_PROBLEMS)."""
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # --help or a usage error: argparse printed it; return its code like any other
        return int(exc.code or 0)
    out_dir: Path = args.out if args.out is not None else args.dirs[0] / "report"
    try:
        runs = load(args.dirs, out_dir)
        variants = group(runs, args.group_by)
        data = summarize(
            args.dirs,
            runs,
            variants,
            args.score,
            args.threshold,
            margins=args.margin,
            adjust=args.adjust,
            allow_mixed_provenance=args.allow_mixed_provenance,
        )
    except Refusal as exc:
        print(f"twinkle-report: {exc}", file=sys.stderr)
        return EXIT_NO_RUNS
    data.plots = plot(variants, data, out_dir)
    print_terminal(data, render(data, out_dir))
    return EXIT_DATA_PROBLEMS if args.strict and problem_items(runs) else 0


if __name__ == "__main__":
    sys.exit(main())
