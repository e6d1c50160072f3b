"""pass@k against k per variant (trainer.val_samples runs): the mean over seeds of each run's last
val/pass@k as a line with its 95% t band, and the first validation's (the warm-start's) as a dashed line, so
that RL's gain at small k and the warm-start's catching up at large k (Yue et al. 2025) read off one plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from twinkle_exp import metric_names as M

from ..loading.runs import Run
from ..statistics.aggregate import mean_band
from .plots import BAND, legend_labels, variant_colors

TITLE = "Sampled pass@k against k (last validation; dashed: the first, the warm-start's)"
FILENAME = "pass_at_k.png"


def logged_ks(runs: list[Run]) -> list[int]:
    """Every k some run logged val/pass@k for, in order."""
    keys = {
        key for r in runs for key, series in r.metrics.items() if key.startswith(M.VAL_PASS_AT) and series
    }
    return sorted(int(key.removeprefix(M.VAL_PASS_AT)) for key in keys)


def _at(runs: list[Run], ks: list[int], index: int) -> np.ndarray:
    """`[runs, len(ks)]`: each run's val/pass@k at its `index`-th sampled validation (NaN where not logged)."""
    out = np.full((len(runs), len(ks)), np.nan)
    for i, r in enumerate(runs):
        for j, k in enumerate(ks):
            series = r.metrics.get(M.VAL_PASS_AT + str(k))
            if series:
                out[i, j] = series[index][1]
    return out


def plot_pass_at_k(
    variants: dict[str, list[Run]],
    out_dir: Path,
    colors: dict[str, object] | None = None,
    filename: str = FILENAME,
) -> Path | None:
    """Write `out_dir/filename`; None (nothing written) when no finished run logged val/pass@k."""
    finished = {label: [r for r in runs if r.finished] for label, runs in variants.items()}
    ks = logged_ks([r for runs in finished.values() for r in runs])
    if not ks:
        return None
    colors = colors or variant_colors(variants)
    legend, shared = legend_labels(variants)
    fig = Figure(figsize=(9, 5.5), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    for label, runs in finished.items():
        last = _at(runs, ks, -1)
        if np.isnan(last).all():
            continue
        seeds = f"{len(runs)} seed" + ("s" if len(runs) > 1 else "")
        ax.plot(ks, 100 * np.nanmean(last, axis=0), color=colors[label], marker="o", markersize=4,
                label=f"{legend[label]} ({seeds})")  # fmt: skip
        ax.plot(
            ks, 100 * np.nanmean(_at(runs, ks, 0), axis=0), color=colors[label], linestyle="--", linewidth=1
        )
        if len(runs) > 1:
            low, high = mean_band(last)
            ax.fill_between(ks, 100 * low, 100 * high, color=colors[label], alpha=0.18, linewidth=0)
    ax.set_xscale("log", base=2)
    # Every k of a short list; of a long one (1..16) the powers of 2, which do not crowd the log axis.
    ticks = ks if len(ks) <= 8 else [k for k in ks if k & (k - 1) == 0]
    ax.set_xticks(ticks, [str(k) for k in ticks])
    ax.minorticks_off()
    ax.set_title(f"{TITLE}\n({BAND})", fontsize=12)
    ax.set_xlabel("k (samples per prompt)")
    ax.set_ylabel("pass@k (%)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.35)
    ax.legend(loc="best", fontsize="small", title=f"all variants: {shared}" if shared else None)
    path = out_dir / filename
    fig.savefig(path, format="png")
    return path
