"""The report on the terminal: the variant table, the jobs, the headline comparisons, the diagnostics, the
data problems (on stderr) and the files written."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..statistics.aggregate import DEFAULT_SCORES
from ..statistics.comparisons import sentence
from .attempts import HEADERS as ATTEMPT_HEADERS
from .attempts import attempt_rows
from .render import ReportData
from .tables import diagnostic_items, problem_items, status_summary, variant_row


def print_terminal(d: ReportData, written: list[Path]) -> None:
    """The variant table, the first score's sentences, the diagnostics, data problems (on stderr), the files."""
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
        table.add_row(row[0], row[1], row[2], row[4], row[6], row[8])  # IQM and KL columns left out
    console.print(table)
    jobs = Table(title="jobs and attempts")
    for header in ATTEMPT_HEADERS:
        jobs.add_column(header, overflow="fold")
    for row in attempt_rows(d.runs):
        jobs.add_row(*row)
    console.print(jobs)
    if d.comparisons.verdicts:
        console.print(f"family: {d.comparisons.describe()}", highlight=False)
    for score in d.scores:
        if score is d.scores[0] or score not in DEFAULT_SCORES:  # the headline (AUC), and any --score
            for v in d.comparisons.of(score):
                console.print(sentence(v, score), highlight=False)
    for warning in d.provenance.warnings():
        console.print(warning, style="yellow", highlight=False)
    for item in diagnostic_items(d.diagnostics, d.identical, d.names):
        console.print(item, style="yellow" if item.startswith("⚠") else None, highlight=False)
    for title, (key, path) in d.plots.items():
        if path is None:
            console.print(f"skipped {title}: no run logged {key}", style="yellow")
    for problem in problem_items(d.runs):
        errors.print(f"data problem: {problem}", style="bold red", highlight=False, soft_wrap=True)
    for path in written:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)
