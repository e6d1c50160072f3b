"""The comparison report's phases, one call each in `__main__.main`: load -> group -> summarize -> plot ->
render. A phase that finds nothing to report, or runs it must not compare (mixed provenance), raises
`Refusal` before anything is written, so a typo in a path or a key leaves no stray report folder behind.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .diagnostics.sweep import diagnose_sweep, identical_variants
from .diagnostics.variants import diagnose_variants
from .loading.grouping import GroupByError, assign_groups, flag_repeated_seeds, group_by_variant
from .loading.provenance import check_provenance
from .loading.runs import Run, load_runs
from .rendering.attempts import render_attempts_markdown
from .rendering.items_section import item_lines
from .rendering.plots import legend_labels, plot_all, variant_colors
from .rendering.plots_intervals import TITLE as INTERVALS_TITLE
from .rendering.plots_intervals import plot_intervals
from .rendering.plots_pass_at_k import TITLE as PASS_AT_K_TITLE
from .rendering.plots_pass_at_k import plot_pass_at_k
from .rendering.render import ReportData, build_blocks, to_html, to_markdown
from .rendering.verdicts_file import BREAKDOWN_CSV_NAME, CSV_NAME, JSON_NAME, write_verdicts
from .statistics.aggregate import DEFAULT_SCORES, Score, grid_spans, metric_score
from .statistics.aggregate import summarize as summarize_variants
from .statistics.comparisons import FAMILY, compare_all
from .statistics.verdicts import DEFAULT_MARGINS
from .statistics.warm_start_design import (
    compare_across,
    compare_per_warm_start,
    design_of,
    pooled_names,
    this_warm_start,
)
from .statistics.warm_starts import split_sentences, warm_start_of


class Refusal(Exception):
    """Nothing to report: the line says why (`twinkle-report: <line>` on stderr)."""


def load(dirs: list[Path], out_dir: Path) -> list[Run]:
    """Every job under `dirs` (the report's own `out_dir` skipped); refuses a missing directory or no jobs."""
    missing = [d for d in dirs if not d.is_dir()]
    if missing:
        raise Refusal(f"no runs found under {missing[0]} (no such directory)")
    runs = load_runs(dirs, skip=out_dir)
    if not runs:
        where = ", ".join(str(d) for d in dirs)
        raise Refusal(f"no runs found under {where} (no directory holding .hydra/overrides.yaml or run.json)")
    return runs


def group(runs: list[Run], keys: list[str] | None) -> dict[str, list[Run]]:
    """The runs by variant (by `keys`, the --group-by config keys, when given); repeated seeds flagged."""
    if keys is not None:
        try:
            assign_groups(runs, keys)
        except GroupByError as exc:
            raise Refusal(str(exc)) from exc
    variants = group_by_variant(runs)
    flag_repeated_seeds(variants)
    return variants


def margins_of(scores: tuple[Score, ...], given: Mapping[str, float]) -> dict[str, float]:
    """The default margins, overridden by --margin SCORE=VALUE (a score's name, or a --score metric's key);
    refuses a name that is no score of the report."""
    margins = {name: value for name, value in DEFAULT_MARGINS.items() if any(s.name == name for s in scores)}
    by_name = {s.name: s.name for s in scores} | {
        s.key: s.name for s in scores if s.fn is not None and s not in DEFAULT_SCORES
    }
    for name, value in given.items():
        if name not in by_name:
            known = ", ".join(s.name for s in scores)
            raise Refusal(f"--margin {name}={value:g}: no such score in this report (scores: {known})")
        margins[by_name[name]] = value
    return margins


def summarize(
    dirs: list[Path],
    runs: list[Run],
    variants: dict[str, list[Run]],
    score_keys: list[str],
    threshold: float,
    *,
    margins: Mapping[str, float] | None = None,
    adjust: str = "holm",
    allow_mixed_provenance: bool = False,
) -> ReportData:
    """The statistics, comparisons and diagnostics of the variants; refuses a --score no run logged, a
    --margin for no score, and finished runs of mixed provenance unless `allow_mixed_provenance`."""
    names, shared = legend_labels(variants)
    scores = DEFAULT_SCORES + tuple(metric_score(key) for key in score_keys)
    unlogged = [key for key in score_keys if not any(key in run.metrics for run in runs)]
    if unlogged:
        raise Refusal(f"--score {unlogged[0]}: no run logged this metric")
    chosen_margins = margins_of(scores, margins or {})
    try:
        spans = grid_spans(runs, scores)
    except ValueError as exc:
        raise Refusal(str(exc)) from exc
    stats = summarize_variants(runs, threshold, scores)
    design = design_of(stats)  # runs that differ only in warmup.seed: a design, not a provenance mix
    finished = [run for run in runs if run.finished]
    provenance = check_provenance(finished, warm_start_of if design is not None else None)
    if provenance.mixed and not allow_mixed_provenance:
        raise Refusal(provenance.refusal())
    pooled = pooled_names(stats, names)
    if design is None:
        levels = {warm_start_of(run) for run in finished}
        population = this_warm_start(levels.pop() if len(levels) == 1 else None)
        comparisons = compare_all(
            stats, scores, names, margins=chosen_margins, method=adjust, population=population
        )
        breakdown = None
    else:
        comparisons = compare_across(
            design, scores, pooled, family_name=FAMILY, margins=chosen_margins, method=adjust
        )
        breakdown = compare_per_warm_start(design, scores, pooled, margins=chosen_margins, method=adjust)
    return ReportData(
        dirs=[d.resolve() for d in dirs],
        runs=runs,
        stats=stats,
        scores=scores,
        comparisons=comparisons,
        provenance=provenance,
        spans=spans,
        diagnostics=diagnose_sweep(variants) + diagnose_variants(variants),
        identical=identical_variants(variants),
        names=names,
        shared=shared,
        threshold=threshold,
        verdict_files=[CSV_NAME, JSON_NAME] + ([BREAKDOWN_CSV_NAME] if breakdown is not None else []),
        warm_starts=split_sentences(runs),
        breakdown=breakdown,
        design="" if design is None else design.describe(),
        items=item_lines(stats, names, design, pooled),
    )


def plot(
    variants: dict[str, list[Run]], data: ReportData, out_dir: Path
) -> dict[str, tuple[str, Path | None]]:
    """Every plot into `out_dir` (created here): title -> (its metric, the PNG, or None when skipped)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = {spec.title: (spec.key, path) for spec, path in plot_all(variants, out_dir).items()}
    colors = variant_colors(variants)
    intervals = plot_intervals(data.stats, data.scores, data.names, colors, out_dir)
    plots[INTERVALS_TITLE] = ("val/accuracy (finished runs)", intervals)
    pass_at_k = plot_pass_at_k(variants, out_dir, colors)
    if pass_at_k is not None:  # only runs with trainer.val_samples log it: no "skipped" line for the others
        plots[PASS_AT_K_TITLE] = ("val/pass@k (finished runs)", pass_at_k)
    return plots


def render(data: ReportData, out_dir: Path) -> list[Path]:
    """report.md, report.html and the verdict files into `out_dir`; every file the report wrote, the plots
    included."""
    blocks = build_blocks(data)
    markdown, page = out_dir / "report.md", out_dir / "report.html"
    markdown.write_text(to_markdown(blocks) + render_attempts_markdown(data.runs), encoding="utf-8")
    page.write_text(to_html(blocks), encoding="utf-8")
    verdicts = write_verdicts(data, out_dir)
    return [markdown, page, *verdicts, *(p for _, p in data.plots.values() if p is not None)]
