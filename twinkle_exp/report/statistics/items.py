"""Held-out items as data: how much of a comparison's interval is the held-out set's own noise.

A run's final accuracy is the mean over the held-out prompts (items) of its greedy correctness, and every run
is scored on the same prompts (the task's `seed` fixes them). The verdicts' intervals treat those prompts as
fixed: they hold the seeds' noise only, and speak for these prompts. To speak for the task (prompts drawn
from its distribution), the prompts' own variation counts too. With two variants' runs paired by seed and
scored on the same items, the per-seed, per-item differences D[s, i] (`[seeds, items]`, each -1, 0 or +1)
are a crossed two-way table: D = delta + seed_s + item_i + residual, seeds and items random. The variance of
the mean difference is (MS_seeds + MS_items - MS_residual) / (S I) (the two-way ANOVA estimates, the
"two-way clustered" standard error), of which MS_seeds / (S I) is the squared standard error of the paired t
over seeds the verdicts use. The rest is what the items add: `item_share` of the variance. Degrees of freedom
by Satterthwaite. Coverage (tests/test_report_items.py): simulated crossed data, items drawn afresh each time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from twinkle_exp import metric_names as M

from ..loading.runs import Run
from .intervals import CONFIDENCE


@dataclass(frozen=True)
class ItemSplit:
    """One pair's final greedy accuracy difference (first - second, a fraction) over `seeds` x `items`."""

    seeds: int
    items: int
    difference: float
    seeds_only: tuple[float, float]  # the interval with the items fixed (the paired t over seeds)
    with_items: tuple[float, float]  # the items a sample of the task's prompts too
    item_share: float  # share of the difference's variance the items add (0 when they add none)


def final_items(run: Run) -> tuple[tuple[int, ...], np.ndarray] | None:
    """(item ids, greedy correctness `[items]`) at the run's last validation, when items.jsonl holds it
    (the step of its last val/accuracy row); None otherwise."""
    accuracy = run.metrics.get(M.VAL_ACCURACY)
    if not run.items or not accuracy:
        return None
    last = run.items[-1]
    if last["step"] != accuracy[-1][0]:
        return None  # the file stopped early (its cap, a kill): its last row is not the run's final figure
    return tuple(last["item"]), np.asarray(last["greedy"], dtype=float)


def crossed_split(differences: np.ndarray, confidence: float = CONFIDENCE) -> ItemSplit:
    """The split of `differences` `[seeds, items]` (module doc); needs 2 seeds and 2 items."""
    d = np.asarray(differences, dtype=float)
    seeds, items = d.shape
    if seeds < 2 or items < 2:
        raise ValueError(f"a crossed split needs 2 seeds and 2 items, got {seeds} x {items}")
    grand = d.mean()
    by_seed, by_item = d.mean(axis=1), d.mean(axis=0)
    ms_seeds = items * np.var(by_seed, ddof=1)
    ms_items = seeds * np.var(by_item, ddof=1)
    residual = d - by_seed[:, None] - by_item[None, :] + grand
    df_seeds, df_items, df_residual = seeds - 1, items - 1, (seeds - 1) * (items - 1)
    ms_residual = float(np.sum(residual**2)) / df_residual
    cells = seeds * items
    var_seeds = ms_seeds / cells
    var_total = max(var_seeds, (ms_seeds + ms_items - ms_residual) / cells)
    terms = np.array([ms_seeds, ms_items, -ms_residual]) / cells
    dfs = np.array([df_seeds, df_items, df_residual], dtype=float)
    df_total = var_total**2 / np.sum(terms**2 / dfs) if var_total > var_seeds else float(df_seeds)
    quantile = 0.5 + confidence / 2

    def bounds(variance: float, df: float) -> tuple[float, float]:
        half = special.stdtrit(df, quantile) * np.sqrt(variance)
        return float(grand - half), float(grand + half)

    share = 0.0 if var_total == 0 else float(1 - var_seeds / var_total)
    return ItemSplit(
        seeds, items, float(grand), bounds(var_seeds, df_seeds), bounds(var_total, df_total), share
    )


def item_split(first: list[Run], second: list[Run]) -> ItemSplit | str:
    """The split of two variants' finished runs paired by seed, or why there is none (a sentence)."""
    by_seed = {r.seed: r for r in second if r.seed is not None}
    rows = []
    for run in first:
        other = by_seed.get(run.seed)
        if other is None:
            continue
        a, b = final_items(run), final_items(other)
        if a is None or b is None:
            continue
        if a[0] != b[0]:
            return "their runs were scored on different held-out items"
        rows.append(a[1] - b[1])
    if len(rows) < 2:
        return f"{len(rows)} seed(s) of both with items.jsonl at the final validation (2 needed)"
    return crossed_split(np.stack(rows))
