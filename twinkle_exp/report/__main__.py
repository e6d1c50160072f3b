"""`python -m twinkle_exp.report <sweep_dir> [--threshold 0.5] [--out DIR]`: write the sweep's report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .aggregate import group_by_variant, summarize
from .attempts import HEADERS as ATTEMPT_HEADERS
from .attempts import attempt_rows, render_attempts_markdown
from .plots import plot_all
from .render import render_html, render_markdown, status_summary, variant_row
from .runs import load_sweep

EXIT_NO_RUNS = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="twinkle-report",
        description="Compare the variants of a sweep: plots and a table over seeds, as Markdown and HTML.",
    )
    parser.add_argument(
        "sweep_dir", type=Path, help="a Hydra multirun directory (job directories at any depth)"
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=0.5,
        help="validation accuracy, as a fraction in [0, 1], for the steps-to-threshold column (default 0.5)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output directory (default: <sweep_dir>/report)"
    )
    args = parser.parse_args(argv)
    if not 0.0 <= args.threshold <= 1.0:
        parser.error(f"--threshold is a fraction in [0, 1], got {args.threshold}")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # --help or a usage error: argparse printed it; return its code like any other
        return int(exc.code or 0)
    sweep_dir: Path = args.sweep_dir
    out_dir: Path = args.out if args.out is not None else sweep_dir / "report"

    # Checked before anything is created, so a typo in the path leaves no stray report folder behind.
    if not sweep_dir.is_dir():
        print(f"twinkle-report: no runs found under {sweep_dir} (no such directory)", file=sys.stderr)
        return EXIT_NO_RUNS
    runs = load_sweep(sweep_dir, skip=out_dir)
    if not runs:
        print(
            f"twinkle-report: no runs found under {sweep_dir} "
            "(no directory holding .hydra/overrides.yaml or run.json)",
            file=sys.stderr,
        )
        return EXIT_NO_RUNS

    stats = summarize(runs, args.threshold)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = plot_all(group_by_variant(runs), out_dir)
    shown_dir = sweep_dir.resolve()
    markdown = out_dir / "report.md"
    text = render_markdown(shown_dir, stats, runs, plots, args.threshold) + render_attempts_markdown(runs)
    markdown.write_text(text, encoding="utf-8")
    page = out_dir / "report.html"
    page.write_text(render_html(shown_dir, stats, runs, plots, args.threshold), encoding="utf-8")

    console = Console()
    table = Table(title=f"{shown_dir} ({status_summary(runs)})")
    # Shorter headers than the files' so that an 80-column terminal leaves room for the variant labels.
    for header in (
        "variant",
        "finished",
        "final acc. (%)",
        f"steps to ≥{args.threshold * 100:g}%",
        "KL",
        "wall",
    ):
        table.add_column(header, overflow="fold")  # labels are long override lists: wrap them, never cut them
    for s in stats:
        table.add_row(*variant_row(s))
    console.print(table)
    jobs = Table(title="jobs and attempts")
    for header in ATTEMPT_HEADERS:
        jobs.add_column(header, overflow="fold")
    for row in attempt_rows(runs):
        jobs.add_row(*row)
    console.print(jobs)
    for spec, path in plots.items():
        if path is None:
            console.print(f"skipped {spec.title}: no run logged {spec.key}", style="yellow")
    for path in [markdown, page, *(p for p in plots.values() if p is not None)]:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
