"""What produced the runs a report compares (run.json's `provenance`), and whether they may be compared.

The same command and seed end at figures as far apart as the gaps a sweep compares on another commit, thread
count, CPU or starting checkpoint, so runs that differ in any of `PROVENANCE_KEYS` are not comparable by
default: the report refuses them in one line (exit status 2) unless `--allow-mixed-provenance` is given, and
then warns on the page. Runs from before run.json recorded a provenance (no `provenance` object) are shown
as "unknown" and compared with a warning: refusing them would lock every older sweep out of the report,
and the warning says that their agreement was not checked.

A run's pairing key is what its seed fixes (`seed_fixes`: prompt stream, sampler stream, warm-start) and the
warm-start it started from: two variants' runs with equal keys at the same seed shared their randomness, so
the report compares them paired. A run without a record has no key and is never paired.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from twinkle_exp.tracking.run_json import PROVENANCE, PROVENANCE_KEYS

from .runs import Run

UNKNOWN = "unknown"
WARM_START_KEY = "warm_start_key"
HEADERS = ["runs", "commit", "dirty", "threads", "cpu", "accelerator", "warm-start key"]
_THREADS = (
    ("torch", "torch"),
    ("torch_interop", "interop"),
    ("OMP_NUM_THREADS", "OMP"),
    ("MKL_NUM_THREADS", "MKL"),
)


def provenance_of(run: Run) -> dict | None:
    """The run's provenance record, None when run.json has none (older runs) or it is not an object."""
    record = run.run_json.get(PROVENANCE)
    return record if isinstance(record, dict) else None


def pairing_key(run: Run) -> str | None:
    """What the run's seed fixes and its warm-start, as one comparable string; None without a record."""
    record = provenance_of(run)
    if record is None or not isinstance(record.get("seed_fixes"), dict):
        return None
    return _canonical({"seed_fixes": record["seed_fixes"], "warm_start_key": record.get("warm_start_key")})


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _show(key: str, value) -> str:
    if value is None:
        return "–"
    if key == "commit":
        return str(value)[:10]
    if key == "threads" and isinstance(value, dict):
        return ", ".join(
            f"{label} {value.get(name) if value.get(name) is not None else '–'}" for name, label in _THREADS
        )
    if key == "warm_start_key":
        return str(value)[:16]
    return str(value)


@dataclass(frozen=True)
class ProvenanceCheck:
    """The provenances of the compared runs: table rows (one per distinct record), the keys that differ
    (key -> each shown value with its run count), and the runs without a record."""

    rows: list[list[str]]
    mixed: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)

    def refusal(self) -> str:
        """The one line the report refuses mixed runs with."""
        parts = "; ".join(
            f"{key} differs ({', '.join(f'{v} in {n} runs' for v, n in values)})"
            for key, values in self.mixed.items()
        )
        return f"the runs mix provenance: {parts}; pass --allow-mixed-provenance to compare them anyway"

    def warnings(self) -> list[str]:
        """What the page says when the runs mix (allowed by the flag) or some records are missing."""
        out = []
        if self.mixed:
            keys = ", ".join(self.mixed)
            out.append(
                f"⚠ compared although their provenance differs ({keys}; --allow-mixed-provenance): a "
                "difference between variants may be a difference between these settings"
            )
        if self.unknown:
            out.append(
                f"⚠ {len(self.unknown)} runs record no provenance (run.json from before it was recorded), "
                f"first {self.unknown[0]}: their commit, threads and hardware are unknown, not checked, and "
                "they are not paired by seed"
            )
        return out


def check_provenance(
    runs: list[Run], warm_start: Callable[[Run], str | None] | None = None
) -> ProvenanceCheck:
    """The provenance table and mismatches of `runs` (the finished runs a report compares).

    warm_start: given when the runs are a warm-start design (runs that differ only in `warmup.seed` and
    `seed`): the warm-start key must then agree within each warm-start (run -> its warmup.seed), not across.
    """
    records = [(run, provenance_of(run)) for run in runs]
    known = [record for _, record in records if record is not None]
    unknown = [run.name for run, record in records if record is None]
    mixed = {}
    for key in PROVENANCE_KEYS:
        counts = Counter(_canonical(record.get(key)) for record in known)
        if key == WARM_START_KEY and warm_start is not None and len(counts) > 1:
            per_level: dict = {}
            for run, record in records:
                if record is not None:
                    per_level.setdefault(warm_start(run), set()).add(_canonical(record.get(key)))
            if all(len(values) == 1 for values in per_level.values()):
                continue  # one key per warm-start: the design, not a mix
        if len(counts) > 1:
            mixed[key] = [(_show(key, json.loads(v)), n) for v, n in counts.most_common()]
    shown = ("commit", "dirty", "threads", "cpu", "accelerator", "warm_start_key")
    rows = Counter(tuple(_show(key, record.get(key)) for key in shown) for record in known)
    table = [[str(n), *row] for row, n in rows.most_common()]
    if unknown:
        table.append([str(len(unknown)), *[UNKNOWN] * len(shown)])
    return ProvenanceCheck(table, mixed, unknown)
