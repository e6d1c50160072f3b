"""The report as a list of blocks (headings, paragraphs, lists, tables, images), written out as Markdown or as
one self-contained HTML page. Both files say the same things in the same order because they share the blocks."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from twinkle_exp.summary.step_grid import GridSpan

from ..diagnostics.sweep import DiagnosticResult
from ..loading.provenance import HEADERS as PROVENANCE_HEADERS
from ..loading.provenance import ProvenanceCheck
from ..loading.runs import Run
from ..statistics.aggregate import Score, VariantStats
from ..statistics.comparisons import Comparisons, points
from .headline import headline, verdict_sentences
from .samples import SAMPLE_HEADERS, sample_note, sample_rows
from .tables import (
    JOB_HEADERS,
    METHOD_NOTES,
    PAIR_HEADERS,
    diagnostic_items,
    job_row,
    pair_row,
    problem_items,
    status_summary,
    variant_headers,
    variant_row,
)


@dataclass
class ReportData:
    """Everything the report shows. `plots`: title -> (metric key, PNG path or None when skipped)."""

    dirs: list[Path]
    runs: list[Run]
    stats: list[VariantStats]
    scores: tuple[Score, ...]
    comparisons: Comparisons
    provenance: ProvenanceCheck
    spans: dict[str, GridSpan]  # grid score name (the AUC) -> the span of steps it is computed over
    diagnostics: list[DiagnosticResult]
    identical: list[tuple[list[str], list[int]]]
    names: dict[str, str]  # variant label -> short name (the overrides every variant shares left out)
    shared: str  # those shared overrides, "" if none
    threshold: float
    plots: dict[str, tuple[str, Path | None]] = field(default_factory=dict)
    verdict_files: list[str] = field(default_factory=list)  # names of the machine-readable verdict files
    warm_starts: list[str] = field(default_factory=list)  # the variance split, when runs vary warmup.seed


WARM_STARTS_NOTE = (
    "The runs vary warmup.seed: each score's spread over the runs of a variant (its overrides less seed and "
    "warmup.seed), split into the part between warm-starts and the part within (one-way random-effects "
    "ANOVA). The verdicts above compare each warm-start's runs on their own, so their intervals hold the "
    "within part only."
)


def span_note(spans: dict[str, GridSpan]) -> list[str]:
    """ "AUC over steps 0-160 (the span every finished run covers)", and the runs that go beyond it."""
    out = []
    for name, span in spans.items():
        note = f"{name} over steps {span.low:g}-{span.high:g}, the span every finished run covers"
        if span.short:
            note += f"; {len(span.short)} of the runs start later or stop earlier than others, which are cut to it"
        out.append(note + ".")
    return out


def family_items(d: ReportData) -> list[str]:
    """What the family is, how it was adjusted, the margins, and which tests were paired."""
    c = d.comparisons
    verdicts = c.verdicts
    paired = sum(v.paired for v in verdicts)
    margins = ", ".join(
        f"{name} ±{points(value, c.scores[name], signed=False)}"
        for name, value in c.margins.items()
        if name in c.scores
    )
    items = [
        f"Family: every pair on every score, {c.describe()} (--adjust holm or bh); every verdict uses the "
        f"adjusted p at alpha = {c.alpha:g}.",
        f"Equivalence margins: {margins or 'none'} (--margin SCORE=VALUE, in the score's units: 0.02 = 2 points).",
        f"Paired (t on per-seed differences; the runs at each seed share prompt and sampler streams and the "
        f"warm-start): {paired} of {len(verdicts)} tests; the others unpaired (Welch t).",
    ]
    if d.verdict_files:
        items.append(
            "Every figure of these tables, per variant and per pair, is also in "
            + " and ".join(f"`{f}`" for f in d.verdict_files)
            + " beside this page (columns: docs/statistics.md)."
        )
    return items


# A block: ("h1" | "h2" | "p", text) | ("ul", [items]) | ("table", headers, rows) | ("img", title, path)
Block = tuple


def build_blocks(d: ReportData) -> list[Block]:
    """The report's content, in order: the headline and the verdicts in words first (one scroll from the
    top), then the tables, checks and plots behind them, then how they are computed and the jobs."""
    where = ", ".join(f"`{p}`" for p in d.dirs)
    blocks: list[Block] = [
        ("h1", f"Sweep report: {where}"),
        ("p", f"{_generated()} {status_summary(d.runs)}."),
        ("p", headline(d.stats, d.scores, d.names)),
    ]
    problems = problem_items(d.runs)
    warnings = d.provenance.warnings()
    if problems or warnings:
        said = [f"{len(problems)} data problem(s)"] if problems else []
        said += [f"{len(warnings)} provenance warning(s)"] if warnings else []
        blocks.append(("p", f"⚠ Read with care: {' and '.join(said)}, listed below the verdicts."))
    blocks.append(("h2", "Variants"))
    if d.shared:
        blocks.append(
            ("p", f"All variants share {d.shared}; comparisons and plots leave it out of their names.")
        )
    rows = [variant_row(s, d.scores, d.names.get(s.label)) for s in d.stats]
    blocks.append(("table", variant_headers(d.threshold, d.scores), rows))
    sentences = verdict_sentences(d.comparisons, d.scores)
    blocks += [
        ("h2", "Verdicts"),
        ("ul", sentences) if sentences else ("p", "No pair of variants was tested (see Pairs not tested)."),
    ]
    if d.warm_starts:
        blocks += [("h2", "Warm-starts"), ("p", WARM_STARTS_NOTE), ("ul", d.warm_starts)]
    if problems:
        blocks += [("h2", "Data problems"), ("p", "Some files could not be read in full:"), ("ul", problems)]
    if d.comparisons.verdicts:
        blocks += [("h2", "Pairwise comparisons"), ("ul", family_items(d))]
    for score in d.scores:
        chosen = d.comparisons.of(score)
        if chosen:
            blocks += [
                ("h2", f"Pairwise comparisons: {score.name}"),
                ("table", PAIR_HEADERS, [pair_row(v, score) for v in chosen]),
            ]
    if d.comparisons.untested:
        blocks += [("h2", "Pairs not tested"), ("ul", d.comparisons.untested)]
    blocks += [
        ("h2", "Provenance"),
        ("table", PROVENANCE_HEADERS, d.provenance.rows),
        ("ul", warnings) if warnings else ("p", "✓ every compared run records the same provenance."),
        ("h2", "Checks"),
        ("ul", diagnostic_items(d.diagnostics, d.identical, d.names)),
        ("h2", "Plots"),
    ]
    for title, (key, path) in d.plots.items():
        blocks.append(
            ("p", f"{title}: skipped, no run logged {key}.") if path is None else ("img", title, path)
        )
    samples = sample_rows(d.stats, d.names)
    blocks += [("h2", "Completions"), ("p", sample_note(samples))]
    if samples:
        blocks.append(("table", SAMPLE_HEADERS, samples))
    blocks += [
        ("h2", "How the tables are computed"),
        ("ul", list(METHOD_NOTES) + span_note(d.spans)),
        ("h2", "Jobs"),
        ("table", JOB_HEADERS, [job_row(r, d.names.get(s.label)) for s in d.stats for r in s.runs]),
    ]
    return blocks


def to_markdown(blocks: list[Block]) -> str:
    """Markdown; images are linked by file name (they sit beside report.md)."""
    lines: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2"):
            lines += [f"{'#' if kind == 'h1' else '##'} {block[1]}", ""]
        elif kind == "p":
            lines += [block[1], ""]
        elif kind == "ul":
            lines += [f"- {item}" for item in block[1]] + [""]
        elif kind == "table":
            lines += _md_table(block[1], block[2]) + [""]
        elif kind == "img":
            lines += [f"![{block[1]}]({block[2].name})", ""]
    return "\n".join(lines)


def to_html(blocks: list[Block]) -> str:
    """One HTML page with the images embedded, so it can be mailed or opened offline on its own."""
    esc, body, title = html.escape, [], "Sweep report"
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2"):
            title = block[1] if kind == "h1" else title
            body.append(f"<{kind}>{_code(esc(block[1]))}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{_code(esc(block[1]))}</p>")
        elif kind == "ul":
            body.append("<ul>" + "".join(f"<li>{_code(esc(item))}</li>" for item in block[1]) + "</ul>")
        elif kind == "table":
            body.append(_html_table(block[1], block[2]))
        elif kind == "img":
            data = base64.b64encode(block[2].read_bytes()).decode("ascii")
            body.append(f'<figure><img alt="{esc(block[1])}" src="data:image/png;base64,{data}"></figure>')
    return HTML_PAGE.format(title=esc(title.replace("`", "")), body="\n".join(body))


HTML_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.92em; }}
th, td {{ border: 1px solid #ccc; padding: 0.35em 0.7em; text-align: left; vertical-align: top; }}
th {{ background: #f2f2f2; }}
tr:nth-child(even) td {{ background: #fafafa; }}
li {{ margin: 0.3em 0; }}
img {{ max-width: 100%; }}
figure {{ margin: 1em 0; }}
code {{ font-size: 0.95em; }}
</style>
</head>
<body>
{body}
</body>
</html>
"""


def _generated() -> str:
    """When the report was made, as a sentence."""
    return f"Generated {datetime.now().isoformat(timespec='seconds')}."


def _code(escaped: str) -> str:
    """`x` -> <code>x</code> in already-escaped text (backticks mark paths in the blocks)."""
    parts = escaped.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table as lines; `|` in cells escaped."""

    def cells(values: list[str]) -> str:
        """One Markdown row."""
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    return [cells(headers), "|" + "---|" * len(headers)] + [cells(row) for row in rows]


def _html_table(headers: list[str], rows: list[list[str]]) -> str:
    """An HTML table with every cell escaped."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
