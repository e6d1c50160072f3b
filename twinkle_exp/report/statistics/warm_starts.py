"""The report's variance split between warm-starts and within, for sweeps that vary `warmup.seed`.

Runs that differ only in `seed` and `warmup.seed` are pooled (the verdicts still compare each warm-start's
runs as their own variant: their intervals hold one warm-start's RL noise), and each score is split into
the part between warm-starts and the part within (`variance_split`). The AUC here is each run's over its
own validation steps (`series.accuracy_auc`), not the report's shared grid.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np

from twinkle_exp import metric_names as M
from twinkle_exp.summary.series import accuracy_auc, last_value
from twinkle_exp.tracking.metrics_csv import Series
from twinkle_exp.tracking.run_json import override_key

from ..loading.runs import Run
from .variance_split import VarianceSplit, variance_split

WARMUP_SEED = "warmup.seed"
SCORES: tuple[tuple[str, Callable[[Series], float]], ...] = (
    ("AUC", accuracy_auc),
    ("final accuracy", last_value),
)


def warm_start_of(run: Run) -> str | None:
    """The run's `warmup.seed`: its override, else its resolved config's; None when neither says."""
    for o in run.overrides:
        if override_key(o) == WARMUP_SEED and "=" in o:
            return o.split("=", 1)[1]
    value = (run.config.get("warmup") or {}).get("seed") if isinstance(run.config, dict) else None
    return None if value is None else str(value)


def pooled_label(run: Run) -> str:
    """The run's variant without its warm-start: its overrides less `seed` and `warmup.seed`."""
    kept = [o for o in run.variant_overrides if override_key(o) != WARMUP_SEED]
    return ", ".join(kept) or "default"


def splits(runs: list[Run], key: str = M.VAL_ACCURACY) -> dict[str, dict[str, VarianceSplit]]:
    """{pooled variant: {score name: its split}} for each pooled variant whose finished runs come from at
    least 2 warm-starts and outnumber them (the others are left out)."""
    pooled: dict[str, dict[str, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        seed = warm_start_of(run)
        if run.finished and seed is not None and run.metrics.get(key):
            pooled[pooled_label(run)][seed].append(run)
    out: dict[str, dict[str, VarianceSplit]] = {}
    for label, by_seed in sorted(pooled.items()):
        if len(by_seed) < 2 or sum(map(len, by_seed.values())) <= len(by_seed):
            continue
        out[label] = {
            name: variance_split({w: [fn(r.metrics[key]) for r in rs] for w, rs in by_seed.items()})
            for name, fn in SCORES
        }
    return out


def split_sentences(runs: list[Run], key: str = M.VAL_ACCURACY, scale: float = 100.0) -> list[str]:
    """One line per pooled variant and score, in points (`scale` x the score's units)."""
    lines = []
    for label, by_score in splits(runs, key).items():
        for name, s in by_score.items():
            lines.append(
                f"{label}, {name}: {s.warm_starts} warm-starts, {s.runs} runs: sd between warm-starts "
                f"{scale * np.sqrt(s.between):.2f} points, within {scale * np.sqrt(s.within):.2f} "
                f"(share between {s.share_between:.2f}; F test of no warm-start effect p = {s.p_value:.3g})"
            )
    return lines
