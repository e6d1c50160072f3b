"""The report as text: table rows shared by the terminal, report.md and report.html (one self-contained page)."""

from __future__ import annotations

import base64
import html
from collections import Counter
from datetime import datetime
from pathlib import Path

from .aggregate import VariantStats, num_evaluated
from .plots import PlotSpec
from .runs import Run

NONE = "–"
METHOD_NOTES = (
    "Table: statistics over finished runs only; final = last logged value of a run; "
    "± is the sample standard deviation over seeds (n − 1).",
    "Steps to threshold: first optimizer step with val/accuracy ≥ threshold, mean over the finished runs "
    "that reached it, with how many reached it out of the finished runs that logged a validation accuracy.",
    "Plots: every run that logged the metric, running and failed ones up to their last logged step. "
    "Seeds logged at different steps are aligned on the union of their steps by forward-filling each run's "
    "last value within that run's own first..last logged step (no extrapolation).",
)


def variant_headers(threshold: float) -> list[str]:
    return [
        "variant",
        "seeds finished / total",
        "final val. accuracy (%)",
        f"steps to ≥ {threshold * 100:g}% acc. (reached)",
        "final KL",
        "mean wall time",
    ]


def variant_row(s: VariantStats) -> list[str]:
    if s.accuracy_mean is None:
        accuracy = NONE
    elif s.accuracy_std is None:
        accuracy = f"{s.accuracy_mean * 100:.1f} (n=1)"
    else:
        accuracy = f"{s.accuracy_mean * 100:.1f} ± {s.accuracy_std * 100:.1f} (n={len(s.final_accuracy)})"
    evaluated, reached = num_evaluated(s), len(s.steps_to_threshold)
    if evaluated == 0:
        steps = NONE
    elif reached == 0:
        steps = f"not reached (0/{evaluated})"
    else:
        steps = f"{s.steps_to_threshold_mean:.1f} ({reached}/{evaluated})"
    kl = NONE if s.kl_mean is None else f"{s.kl_mean:.4g}"
    return [
        s.label,
        f"{s.num_finished}/{s.num_total}",
        accuracy,
        steps,
        kl,
        format_duration(s.wall_time_mean),
    ]


STATUS_ORDER = ("finished", "running", "failed", "not started")
JOB_HEADERS = ["job", "variant", "seed", "status", "wall time", "error"]


def job_row(run: Run) -> list[str]:
    seed = NONE if run.seed is None else str(run.seed)
    error = " ".join(run.error.split())[:300] if run.error else ""  # one line, bounded: tracebacks are long
    return [run.name, run.variant, seed, run.status, format_duration(run.wall_time_s), error]


def status_summary(runs: list[Run]) -> str:
    counts = Counter(run.status for run in runs)
    known = [s for s in STATUS_ORDER if s in counts]
    parts = ", ".join(f"{counts[s]} {s}" for s in known + sorted(set(counts) - set(known)))
    return f"{len(runs)} jobs: {parts}"


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return NONE
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def render_markdown(
    sweep_dir: Path,
    stats: list[VariantStats],
    runs: list[Run],
    plots: dict[PlotSpec, Path | None],
    threshold: float,
) -> str:
    lines = [
        f"# Sweep report: `{sweep_dir}`",
        "",
        _generated(),
        "",
        status_summary(runs),
        "",
        "## Variants",
        "",
    ]
    lines += _md_table(variant_headers(threshold), [variant_row(s) for s in stats])
    lines += [""] + [f"- {note}" for note in METHOD_NOTES] + ["", "## Plots", ""]
    for spec, path in plots.items():
        if path is None:
            lines.append(f"*{spec.title}: skipped, no run logged `{spec.key}`.*")
        else:
            lines.append(f"![{spec.title}]({path.name})")
        lines.append("")
    lines += ["## Jobs", ""]
    lines += _md_table(JOB_HEADERS, [job_row(r) for s in stats for r in s.runs])
    return "\n".join(lines) + "\n"


def render_html(
    sweep_dir: Path,
    stats: list[VariantStats],
    runs: list[Run],
    plots: dict[PlotSpec, Path | None],
    threshold: float,
) -> str:
    esc = html.escape
    body = [
        f"<h1>Sweep report: <code>{esc(str(sweep_dir))}</code></h1>",
        f"<p>{esc(_generated())}<br>{esc(status_summary(runs))}</p>",
        "<h2>Variants</h2>",
        _html_table(variant_headers(threshold), [variant_row(s) for s in stats]),
        "<ul>" + "".join(f"<li>{esc(note)}</li>" for note in METHOD_NOTES) + "</ul>",
        "<h2>Plots</h2>",
    ]
    for spec, path in plots.items():
        if path is None:
            body.append(
                f"<p><em>{esc(spec.title)}: skipped, no run logged <code>{esc(spec.key)}</code>.</em></p>"
            )
        else:
            # Embedded, not linked, so the page can be mailed or opened offline on its own.
            data = base64.b64encode(path.read_bytes()).decode("ascii")
            body.append(f'<figure><img alt="{esc(spec.title)}" src="data:image/png;base64,{data}"></figure>')
    body += ["<h2>Jobs</h2>", _html_table(JOB_HEADERS, [job_row(r) for s in stats for r in s.runs])]
    return HTML_PAGE.format(title=esc(f"Sweep report: {sweep_dir.name}"), body="\n".join(body))


HTML_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.92em; }}
th, td {{ border: 1px solid #ccc; padding: 0.35em 0.7em; text-align: left; vertical-align: top; }}
th {{ background: #f2f2f2; }}
tr:nth-child(even) td {{ background: #fafafa; }}
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
    return f"Generated {datetime.now().isoformat(timespec='seconds')}."


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    def cells(values: list[str]) -> str:
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    return [cells(headers), "|" + "---|" * len(headers)] + [cells(row) for row in rows]


def _html_table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
