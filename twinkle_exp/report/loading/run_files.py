"""Reading one job's files for `runs.load_run`: run.json, Hydra's YAML files, and what run.json says about
the metrics file (whether it was cut short), each as a value and the problem that kept it from being read.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import yaml

from twinkle_exp import metric_names as M
from twinkle_exp.tracking.metrics_csv import Series
from twinkle_exp.tracking.run_json import METRICS_CSV, RUN_JSON, override_key, read_run_json_checked

OVERRIDES_FILE = os.path.join(".hydra", "overrides.yaml")
CONFIG_FILE = os.path.join(".hydra", "config.yaml")  # the job's resolved config
HYDRA_FILE = os.path.join(".hydra", "hydra.yaml")  # Hydra's own config: which option of each group was chosen


def ends_early(info: dict, series: dict[str, Series]) -> str | None:
    """Why a finished run's metrics are left out, when its metrics.csv stops before run.json's last step.

    A cut file's curve would pass for the whole run (its last accuracy for the final one), so the run's
    metrics are not used at all; run.json's own final figure is named so the reader can see the gap.
    """
    final = info.get("final") if isinstance(info.get("final"), dict) else {}
    steps = number(final.get("steps"))
    if steps is None or not series.get(M.VAL_ACCURACY) or series[M.VAL_ACCURACY][-1][0] >= steps:
        return None
    last = max(points[-1][0] for points in series.values() if points)
    accuracy = number(final.get("accuracy_after"))
    said = f", final {M.VAL_ACCURACY} {accuracy:.1%}" if accuracy is not None else ""
    return (
        f"finished at step {int(steps)} ({RUN_JSON}{said}), but {METRICS_CSV} has no {M.VAL_ACCURACY} at that "
        f"step (its rows end at step {last}: cut short or replaced): left out of the statistics and plots"
    )


def read_run_json(path: Path) -> tuple[dict, dict]:
    """(run.json as written, as the report reads it): ({}, {}) when absent; ({}, status "unknown" with the
    reason) when unreadable, as when the trainer was killed while writing it: the job is reported, not hidden."""
    data, why = read_run_json_checked(path)
    return data, ({"status": "unknown", "error": why} if why else data)


def read_yaml_dict(path: Path) -> tuple[dict, str | None]:
    """(mapping, None), or ({}, why) when the file exists but is not a readable YAML mapping; ({}, None) if absent."""
    if not path.is_file():
        return {}, None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return {}, f"{path.name} unreadable ({type(exc).__name__}): its config values are unknown"
    if not isinstance(data, dict):
        return {}, f"{path.name} is not a mapping: its config values are unknown"
    return data, None


def read_overrides(path: Path) -> list:
    """The list in .hydra/overrides.yaml, [] when absent or unreadable."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return []
    return data if isinstance(data, list) else []


def is_seed_override(override: str) -> bool:
    """Whether the override sets the top-level `seed`: "+seed=1" and "++seed=1" set the same key as "seed=1";
    "loss.seed=1" would be a different key."""
    return override_key(override) == "seed"


def seed_of(value, overrides: list[str]) -> int | None:
    """The run's seed from run.json, else from its overrides; None when neither says."""
    if value is None:
        value = next((o.split("=", 1)[1] for o in overrides if is_seed_override(o) and "=" in o), None)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def number(cell) -> float | None:
    """A finite float from run.json, or None for a missing, non-numeric or non-finite value."""
    if cell is None or cell == "":
        return None
    try:
        value = float(cell)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
