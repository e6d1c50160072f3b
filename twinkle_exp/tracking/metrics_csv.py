"""Read one run's metrics.csv (Lightning's CSVLogger) into one series per metric, saying what was wrong with it.

Nothing here assumes one row per rollout: rows are sparse (a cell is empty where its metric was not logged),
a step can appear on several rows (training and validation rows, or micro-steps), and metrics can be logged at
different steps from each other (rollout-level metrics at a rollout's first optimizer step, training metrics at
every optimizer step, validation at its own steps). Each metric is read by its key and its steps.
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

Series = list[tuple[int, float]]  # (optimizer step, value), sorted by step, one value per step


@dataclass
class MetricsFile:
    """What a metrics.csv held: finite values per metric, where values were not finite, and what was wrong."""

    series: dict[str, Series] = field(default_factory=dict)
    nonfinite: dict[str, list[int]] = field(default_factory=dict)  # metric -> steps logged as NaN or +-inf
    problems: list[str] = field(default_factory=list)  # one sentence each, for the report's "Data problems"


def read_metrics(csv_path: Path) -> MetricsFile:
    """Parse `csv_path`; a missing file gives an empty MetricsFile (whether that is a problem is the caller's call).

    Several values of one metric at one step (gradient-accumulation micro-steps) are averaged. A file that ends
    mid-row (the process died while writing) or cannot be read to its end keeps the whole rows read before the fault,
    and the fault is recorded in `problems`: a report must say so rather than compute silently.
    """
    out = MetricsFile()
    if not csv_path.is_file():
        return out
    text = _read_text(csv_path, out.problems)
    values: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    nonfinite: dict[str, set[int]] = defaultdict(set)
    line = 1
    garbled: list[str] = []  # "line N, column K" of cells that are neither empty nor a number
    try:
        with io.StringIO(text, newline="") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or "step" not in reader.fieldnames:
                out.problems.append(f"{csv_path.name} has no 'step' column: not a metrics file, or empty")
                return out
            width = len(reader.fieldnames)
            for row in reader:
                line = reader.line_num
                if None in row or None in row.values():
                    # Lightning writes every column on every row, so a short or long row is a damaged one.
                    cells = width - sum(v is None for v in row.values()) + len(row.get(None) or [])
                    out.problems.append(
                        f"{csv_path.name} line {line}: {cells} cells where the header has {width} "
                        "(cut short: the run stopped mid-write); the row is dropped, its last cell may be cut"
                    )
                    continue
                step = _parse(row.get("step"))
                if step is None or not math.isfinite(step):
                    out.problems.append(
                        f"{csv_path.name} line {line}: step {row.get('step')!r} is not a number"
                    )
                    continue
                for key, cell in row.items():
                    if key is None or key in ("step", "epoch"):
                        continue
                    value = _parse(cell)
                    if value is None:
                        if cell:
                            garbled.append(f"line {line}, column {key!r}")
                        continue
                    if math.isfinite(value):
                        values[key][int(step)].append(value)
                    else:
                        nonfinite[key].add(int(step))
    except csv.Error as exc:
        out.problems.append(
            f"{csv_path.name} unreadable after line {line} ({type(exc).__name__}: {exc}); "
            "only the rows before it are used"
        )
    if garbled:
        out.problems.append(
            f"{csv_path.name}: {len(garbled)} cells are not numbers (first at {garbled[0]}); they were skipped"
        )
    out.series = {
        key: [(step, sum(vs) / len(vs)) for step, vs in sorted(by_step.items())]
        for key, by_step in values.items()
    }
    out.nonfinite = {key: sorted(steps) for key, steps in nonfinite.items()}
    return out


def _read_text(csv_path: Path, problems: list[str]) -> str:
    """The file's text up to its last complete line; what was cut off or undecodable goes into `problems`."""
    try:
        raw = csv_path.read_bytes()
    except OSError as exc:
        problems.append(f"{csv_path.name} unreadable ({type(exc).__name__}: {exc}): no metrics from this run")
        return ""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = raw[: exc.start].decode("utf-8")
        problems.append(
            f"{csv_path.name} unreadable after byte {exc.start} (not UTF-8 text: {exc.reason}); "
            "only the rows before it are used"
        )
    if text and not text.endswith("\n"):
        # Every row a logger writes ends with a line break: a last line without one was cut mid-write, and
        # its last cell may be a cut number ("0.6" of "0.65") that would otherwise parse.
        kept, _, cut = text.rpartition("\n")
        problems.append(f"{csv_path.name}: the last line ({cut[:40]!r}) has no line end (cut short): dropped")
        text = kept + "\n" if kept else ""
    return text


def _parse(cell) -> float | None:
    """The cell as a float (NaN and inf included), or None for an empty or non-numeric cell."""
    if cell is None or cell == "":
        return None
    try:
        return float(cell)
    except (TypeError, ValueError):
        return None
