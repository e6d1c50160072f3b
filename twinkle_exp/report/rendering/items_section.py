"""The report's *Held-out items* section: per pair, how much of its final-accuracy interval is the held-out
set's own noise (`statistics.items`), in words."""

from __future__ import annotations

from itertools import combinations

from ..statistics.aggregate import FINAL_ACCURACY, VariantStats
from ..statistics.items import ItemSplit, item_split
from ..statistics.warm_start_design import WarmStartDesign

NOTE = (
    "From each run's items.jsonl (every held-out prompt's greedy result at every validation): per pair of "
    "variants, the final greedy accuracy's difference over seeds x held-out items paired by seed, with the "
    "items fixed (what the verdicts speak for: these prompts) and with the items a sample of the task's "
    "prompts (crossed seeds x items, two-way ANOVA, Satterthwaite df), and the share of the variance the "
    "items add: the evaluation noise that the verdicts' intervals leave out."
)


def _line(first: str, second: str, where: str, split: ItemSplit | str) -> str:
    if isinstance(split, str):
        return f"{first} vs {second}{where}: no per-item figures ({split})."
    lo, hi = split.seeds_only
    wlo, whi = split.with_items
    return (
        f"{first} vs {second}{where}: final greedy accuracy {100 * split.difference:+.1f} pp over "
        f"{split.seeds} seeds x {split.items} items; items fixed [{100 * lo:+.1f}, {100 * hi:+.1f}] pp, items "
        f"as a sample of the task's prompts [{100 * wlo:+.1f}, {100 * whi:+.1f}] pp: the items add "
        f"{split.item_share:.0%} of the variance."
    )


def item_lines(
    stats: list[VariantStats], names: dict[str, str], design: WarmStartDesign | None, pooled: dict[str, str]
) -> list[str]:
    """One sentence per pair (per warm-start in a warm-start design); [] when no run kept items.jsonl."""
    if not any(r.items for s in stats for r in s.runs):
        return []
    key = FINAL_ACCURACY.name
    if design is None:
        return [
            _line(
                names.get(a.label, a.label),
                names.get(b.label, b.label),
                "",
                item_split(a.scored[key], b.scored[key]),
            )
            for a, b in combinations(stats, 2)
        ]
    lines = []
    for a, b in combinations(design.cells, 2):
        for level in design.levels:
            cell_a, cell_b = design.cells[a].get(level), design.cells[b].get(level)
            if cell_a is not None and cell_b is not None:
                split = item_split(cell_a.scored[key], cell_b.scored[key])
                lines.append(_line(pooled.get(a, a), pooled.get(b, b), f" (warmup.seed={level})", split))
    return lines
