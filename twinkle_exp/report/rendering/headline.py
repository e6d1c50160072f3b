"""The top of the report: the headline score of every variant in one sentence, and every pair's verdict in
words, so that a reader has the result within one scroll of the top; the tables behind them come after."""

from __future__ import annotations

from ..statistics.aggregate import Score, VariantStats
from ..statistics.comparisons import Comparisons, sentence


def headline(stats: list[VariantStats], scores: tuple[Score, ...], names: dict[str, str]) -> str:
    """ "Headline: AUC, mean over seeds, highest first: loss=sapo 45.2% (2 seeds), loss=grpo 40.1% (2 seeds)." """
    if not scores:
        return "Headline: no score to compare the variants on."
    score = scores[0]
    ranked = sorted(
        (s for s in stats if score.name in s.estimates), key=lambda s: -s.estimates[score.name].value
    )
    if not ranked:
        return f"Headline: no finished run has a {score.name} yet."
    unit = score.unit if score.unit == "%" else f" {score.unit}" if score.unit else ""
    parts = ", ".join(
        f"{names.get(s.label) or s.label} {s.estimates[score.name].value * score.scale:.1f}{unit} "
        f"({len(s.scores.get(score.name, []))} {'seed' if len(s.scores.get(score.name, [])) == 1 else 'seeds'})"
        for s in ranked
    )
    return f"Headline: {score.name}, mean over seeds, highest first: {parts}."


def verdict_sentences(comparisons: Comparisons, scores: tuple[Score, ...]) -> list[str]:
    """Every tested pair's verdict as a sentence, by score in the order of `scores`."""
    return [sentence(v, score) for score in scores for v in comparisons.of(score)]
