"""The report's figures for programs: verdicts.csv (one row per pair of the family, `PairVerdict.to_row()`)
and verdicts.json (the family, the margins, the provenance check, every variant's scores with their
intervals and steps to threshold, and the same pair rows). Columns: docs/statistics.md, "The verdicts file".
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

from ..loading.provenance import HEADERS as PROVENANCE_HEADERS
from ..statistics.verdicts import PairVerdict
from .render import ReportData

CSV_NAME, JSON_NAME = "verdicts.csv", "verdicts.json"
BREAKDOWN_CSV_NAME = "verdicts_by_warm_start.csv"  # a warm-start design's per-warm-start rows
COLUMNS = [f.name for f in dataclasses.fields(PairVerdict)]


def variant_rows(d: ReportData) -> list[dict]:
    """One row per variant and score: seeds, mean, its t interval, IQM, the per-seed values."""
    rows = []
    for s in d.stats:
        for score in d.scores:
            e = s.estimates.get(score.name)
            if e is None:
                continue
            rows.append(
                dict(
                    variant=d.names.get(s.label, s.label), label=s.label, score=score.name, n=e.n,
                    mean=e.value, low=e.low, high=e.high, confidence=e.confidence, interval=e.method,
                    iqm=s.iqm[score.name], values=s.scores[score.name],
                    seeds=[r.seed for r in s.scored[score.name]],
                )
            )  # fmt: skip
    return rows


def threshold_rows(d: ReportData) -> list[dict]:
    """One row per variant: restricted mean steps to the threshold, its interval, runs that reached it."""
    rows = []
    for s in d.stats:
        t = s.threshold
        if t is not None:
            row = dataclasses.asdict(t) | {"fraction_reached": t.fraction_reached}
            rows.append({"variant": d.names.get(s.label, s.label), "threshold": d.threshold, **row})
    return rows


def write_verdicts(d: ReportData, out_dir: Path) -> list[Path]:
    """verdicts.csv and verdicts.json into `out_dir`; the paths written."""
    pairs = [v.to_row() for v in d.comparisons.verdicts]
    csv_path, json_path = out_dir / CSV_NAME, out_dir / JSON_NAME
    write_csv(csv_path, pairs)
    written = [csv_path, json_path]
    breakdown = [] if d.breakdown is None else [v.to_row() for v in d.breakdown.verdicts]
    if d.breakdown is not None:
        written.append(write_csv(out_dir / BREAKDOWN_CSV_NAME, breakdown))
    c = d.comparisons
    document = {
        "family": {
            "description": c.describe(),
            "size": c.family.size,
            "adjustment": c.family.method,
            "alpha": c.alpha,
            "members": [list(m) for m in c.family.members],
        },
        "margins": dict(c.margins),
        "spans": {name: {"low": span.low, "high": span.high} for name, span in d.spans.items()},
        "provenance": {
            "table": [dict(zip(PROVENANCE_HEADERS, row, strict=True)) for row in d.provenance.rows],
            "mixed": {key: [list(v) for v in values] for key, values in d.provenance.mixed.items()},
            "unknown": d.provenance.unknown,
        },
        "scores": variant_rows(d),
        "steps_to_threshold": threshold_rows(d),
        "pairs": pairs,
        "untested": c.untested,
        "design": d.design or None,
        "per_warm_start": breakdown,
    }
    json_path.write_text(json.dumps(document, indent=2, default=str), encoding="utf-8")
    return written


def write_csv(path: Path, rows: list[dict]) -> Path:
    """Pair rows under COLUMNS (None as an empty cell)."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return path
