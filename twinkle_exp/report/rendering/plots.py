"""One PNG per metric: every variant's mean over seeds as a line, and the 95% t interval of that mean as a
band wherever at least 2 seeds logged the step."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Figure objects render through the Agg canvas without pyplot, so no global backend or figure registry is
# touched: safe on a headless node and inside a test process that imported pyplot elsewhere.
from matplotlib import colormaps
from matplotlib.figure import Figure

from twinkle_exp import metric_names as M

from ..loading.runs import Run
from ..statistics.aggregate import curve

BAND = "line: mean over seeds, band: 95% t interval of the mean"


@dataclass(frozen=True)
class PlotSpec:
    """One plot: which metric, which file, its title and y label, and the scale of its values."""

    key: str  # metric column in metrics.csv
    filename: str
    title: str
    ylabel: str
    scale: float = 1.0  # fractions are shown as percentages


PLOTS = (
    PlotSpec(
        M.VAL_ACCURACY,
        "val_accuracy.png",
        "Greedy validation accuracy",
        "greedy validation accuracy (%)",
        100.0,
    ),
    PlotSpec(M.REWARD_MEAN, "reward.png", "Training reward", "mean reward per completion"),
    PlotSpec(M.ENTROPY, "entropy.png", "Policy entropy on its own samples", "entropy (nats per token)"),
    PlotSpec(M.KL, "kl.png", "KL divergence to the reference policy", "KL estimate (nats per token)"),
    PlotSpec(
        M.COMPLETION_LENGTH_CORRECT,
        "length_correct.png",
        "Completion length of correct completions (the reward's verdict)",
        "mean length, correct (tokens)",
    ),
    PlotSpec(
        M.COMPLETION_LENGTH_INCORRECT,
        "length_incorrect.png",
        "Completion length of incorrect completions (the reward's verdict)",
        "mean length, incorrect (tokens)",
    ),
    PlotSpec(
        M.CLIP_REGION,
        "clip_fraction.png",
        "Clipped tokens (lower or upper clip binding)",
        "clipped completion tokens (%)",
        100.0,
    ),
)

# Enough markers to read sparse curves (validation every few steps), none on dense ones where they clutter.
MAX_POINTS_WITH_MARKERS = 40


def plot_metric(
    variants: dict[str, list[Run]], spec: PlotSpec, out_dir: Path, colors: dict[str, object] | None = None
) -> Path | None:
    """Write `out_dir/spec.filename`; None (and nothing written) when no run logged `spec.key`."""
    colors = colors or variant_colors(variants)
    legend, shared = legend_labels(variants)
    curves = {}
    for label, runs in variants.items():
        c = curve([run.metrics.get(spec.key, []) for run in runs])
        if c is not None:
            unfinished = sum(1 for run in runs if spec.key in run.metrics and not run.finished)
            curves[label] = (c, unfinished)
    if not curves:
        return None

    many = len(curves) > 4 or max(len(legend[label]) for label in curves) > 40
    fig = Figure(figsize=(9, 5.5 + (0.3 * len(curves) if many else 0)), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    for label, (c, unfinished) in curves.items():
        seeds = f"{c.num_runs} seed" + ("s" if c.num_runs > 1 else "")
        if unfinished:
            seeds += f", {unfinished} unfinished"
        ax.plot(
            c.steps,
            c.mean * spec.scale,
            color=colors[label],
            marker="o" if len(c.steps) <= MAX_POINTS_WITH_MARKERS else None,
            markersize=4,
            linewidth=1.8,
            label=f"{legend[label]} ({seeds})",
        )
        if c.num_runs > 1:
            alpha = 0.18 if len(curves) <= 4 else 0.1  # overlapping bands of many variants turn to mud
            ax.fill_between(
                c.steps,
                c.low * spec.scale,
                c.high * spec.scale,
                color=colors[label],
                alpha=alpha,
                linewidth=0,
            )
    ax.set_title(f"{spec.title}\n({BAND})", fontsize=12)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(spec.ylabel)
    ax.grid(True, alpha=0.35)
    if spec.scale == 100.0:
        ax.set_ylim(bottom=0)  # percentages of something that cannot be negative
    shared_title = f"all variants: {shared}" if shared else None
    if many:
        # Long or numerous labels would cover the curves: put the legend under the axes.
        ncol = 1 if len(curves) < 6 else 2
        ax.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=ncol, fontsize="small", title=shared_title
        )
    else:
        ax.legend(loc="best", fontsize="small", title=shared_title)
    path = out_dir / spec.filename
    fig.savefig(path, format="png")
    return path


def plot_all(variants: dict[str, list[Run]], out_dir: Path) -> dict[PlotSpec, Path | None]:
    """Every PLOTS spec for `variants` (label -> runs) into `out_dir`; spec -> path, None where skipped."""
    colors = variant_colors(variants)
    return {spec: plot_metric(variants, spec, out_dir, colors) for spec in PLOTS}


def variant_colors(variants: dict[str, list[Run]]) -> dict[str, object]:
    """One color per variant, the same in every plot even where some variant lacks the metric."""
    cmap = colormaps["tab10" if len(variants) <= 10 else "tab20"]
    return {label: cmap(i % cmap.N) for i, label in enumerate(variants)}


def legend_labels(variants: dict[str, list[Run]]) -> tuple[dict[str, str], str]:
    """Legend label per variant without the overrides every variant shares, and those shared overrides.

    In a sweep like `loss=grpo,sapo trainer.max_steps=20` the shared part would repeat in every legend entry
    and push the part that differs out of sight; it is shown once, as the legend's title, instead.
    """
    overrides = {label: runs[0].variant_overrides for label, runs in variants.items()}
    if len(overrides) < 2:
        return {label: label for label in overrides}, ""
    common = set.intersection(*(set(o) for o in overrides.values()))
    first = next(iter(overrides.values()))
    shared = ", ".join(o for o in first if o in common)
    labels = {
        label: ", ".join(o for o in ovr if o not in common) or label for label, ovr in overrides.items()
    }
    return labels, shared
