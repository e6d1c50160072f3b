"""One PNG of interval estimates per variant, after rliable's aggregate-metrics plot: for each score (final
accuracy, area under the accuracy curve, any --score), each seed as a dot and the mean with its 95% t interval
as a bar."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from ..statistics.aggregate import Score, VariantStats

FILENAME = "intervals.png"
TITLE = "Scores per variant: seeds and the mean's interval"


def plot_intervals(
    stats: list[VariantStats],
    scores: tuple[Score, ...],
    names: dict[str, str],
    colors: dict[str, object],
    out_dir: Path,
) -> Path | None:
    """Write `out_dir/intervals.png`, one panel per score; None (nothing written) when no variant has a
    finished, validated run.

    names: variant label -> the short label to show; colors: variant label -> the color of its curves.
    """
    shown = [s for s in stats if s.final_accuracy]
    if not shown:
        return None
    fig = Figure(
        figsize=(4 + 3.5 * len(scores), max(3.0, 1.6 + 0.45 * len(shown))), dpi=110, layout="constrained"
    )
    axes = fig.subplots(1, len(scores), sharey=True, squeeze=False)[0]
    for ax, score in zip(axes, scores, strict=True):
        for row, s in enumerate(reversed(shown)):  # first variant on top
            est = s.estimates.get(score.name)
            if est is None:
                continue
            values = [v * score.scale for v in s.scores[score.name]]
            color = colors.get(s.label, "black")
            if est.low is not None:
                ax.plot(
                    [est.low * score.scale, est.high * score.scale], [row, row], color=color, lw=6, alpha=0.35
                )
            ax.plot(
                [est.value * score.scale], [row], marker="|", markersize=16, color=color, markeredgewidth=2.5
            )
            ax.plot(values, [row] * len(values), "o", color=color, markersize=4, alpha=0.9)
        unit = f" ({score.unit})" if score.unit else ""
        ax.set_title(score.name + unit, fontsize=11)
        ax.set_xlabel(f"{score.name} of a run{unit}")
        ax.grid(True, axis="x", alpha=0.35)
    axes[0].set_yticks(range(len(shown)), [names.get(s.label, s.label) for s in reversed(shown)])
    fig.suptitle(f"{TITLE}\n(dots: seeds; tick: mean; bar: 95% t interval of the mean)", fontsize=11)
    path = out_dir / FILENAME
    fig.savefig(path, format="png")
    return path
