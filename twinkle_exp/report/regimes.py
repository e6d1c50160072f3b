"""`python -m twinkle_exp.report.regimes NAME=REPORT_DIR [NAME=REPORT_DIR ...] [--score AUC] [--out FILE.md]`:
where the losses separate and where they do not, one column per regime.

Each REPORT_DIR is the output of `python -m twinkle_exp.report` on one regime's sweep (its verdicts.csv);
NAME labels the column ("default", "staleness4", ...). Every regime keeps its own family of tests (its
report's Holm or BH over its pairs and scores): a column's adjusted p is its regime's. For each pair of
variants (matched by label across regimes: give every report the same `--group-by`, e.g. `loss`, so that a
regime's own overrides do not enter the labels) and the chosen score, a cell shows the effect (first minus
second) with its interval, the adjusted p, the verdict, and the minimum detectable effect; a pair that
changes verdict between regimes is marked. A pair no regime called is not "equal": the MDE column says
how large a difference its seeds could have missed.

A change of verdict is a crossing of alpha, not a test that the regime matters. That test is the second
table's: for each pair, each regime's effect minus the first (baseline) regime's, the difference of
differences, with its interval and a t test (the two regimes' runs are independent: the standard errors,
recovered from each interval, add in quadrature, Welch-Satterthwaite degrees of freedom). The page's
interaction tests are one family, Holm-adjusted together; "separates" needs that adjusted p below alpha.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from scipy import stats

from .rendering.verdicts_file import CSV_NAME
from .statistics.multiplicity import adjust

SCALE = {"AUC": 100.0, "final accuracy": 100.0}  # the report's accuracy scores, fractions shown in points


@dataclass(frozen=True)
class Cell:
    effect: float
    low: float
    high: float
    p_adjusted: float | None
    verdict: str
    mde: float
    n: int  # seeds of the smaller arm
    family_size: int
    confidence: float = 0.95  # the interval's level (the report's 1 - alpha)


@dataclass(frozen=True)
class Interaction:
    """One pair's effect in `regime` minus its effect in `baseline` (score units), with its interval at the
    family's level before adjustment, the t test's degrees of freedom and p (raw, and Holm over the page)."""

    pair: tuple[str, str]
    regime: str
    baseline: str
    effect: float
    low: float
    high: float
    df: float
    p_raw: float | None  # None: both intervals of zero width, not tested
    p_adjusted: float | None
    verdict: str


def _float(row: dict[str, str], key: str) -> float | None:
    value = row.get(key, "")
    return None if value in ("", "None") else float(value)


def read_regime(report_dir: Path, score: str) -> dict[tuple[str, str], Cell]:
    """{(first, second): Cell} of `score` from `report_dir/verdicts.csv`; ValueError naming what is missing."""
    path = report_dir / CSV_NAME
    if not path.is_file():
        raise ValueError(
            f"{path}: no such file (run python -m twinkle_exp.report on the regime's sweep first)"
        )
    with path.open(encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r.get("score") == score]
    if not rows:
        raise ValueError(f"{path}: no pair of score {score!r}")
    return {
        (r["first"], r["second"]): Cell(
            effect=float(r["effect"]),
            low=float(r["low"]),
            high=float(r["high"]),
            p_adjusted=_float(r, "p_adjusted"),
            verdict=r["verdict"],
            mde=float(r["mde"]),
            n=min(int(r["n_first"]), int(r["n_second"])),
            family_size=int(r["family_size"]),
            confidence=_float(r, "confidence") or 0.95,
        )  # fmt: skip
        for r in rows
    }


def _pair_cell(regime: dict[tuple[str, str], Cell], pair: tuple[str, str]) -> Cell | None:
    """The pair's cell, its sign turned when the regime's report ordered the pair the other way."""
    if pair in regime:
        return regime[pair]
    c = regime.get((pair[1], pair[0]))
    if c is None:
        return None
    return Cell(-c.effect, -c.high, -c.low, c.p_adjusted, c.verdict, c.mde, c.n, c.family_size, c.confidence)


def _pairs(regimes: dict[str, dict[tuple[str, str], Cell]]) -> list[tuple[str, str]]:
    """Every pair of any regime, once, in the first regime's order and then the others'."""
    pairs: list[tuple[str, str]] = []
    for cells in regimes.values():
        for pair in cells:
            if pair not in pairs and (pair[1], pair[0]) not in pairs:
                pairs.append(pair)
    return pairs


def _standard_error(c: Cell) -> tuple[float, int]:
    """The effect's standard error, recovered from its t interval, and the interval's degrees of freedom:
    n - 1 of the smaller arm (a paired t's exactly; a Welch t's at least that, so the error is not too small)."""
    df = max(c.n - 1, 1)
    return (c.high - c.low) / 2 / stats.t.ppf(0.5 + c.confidence / 2, df), df


def interactions(regimes: dict[str, dict[tuple[str, str], Cell]], alpha: float = 0.05) -> list[Interaction]:
    """Every pair's effect in each regime minus its effect in the first regime, tested, one Holm family."""
    baseline, *others = list(regimes)
    found = []
    for pair in _pairs(regimes):
        base = _pair_cell(regimes[baseline], pair)
        for name in others:
            cell = _pair_cell(regimes[name], pair)
            if base is None or cell is None:
                continue
            (se_base, df_base), (se_cell, df_cell) = _standard_error(base), _standard_error(cell)
            effect, se = cell.effect - base.effect, math.hypot(se_base, se_cell)
            if se == 0:  # both intervals of zero width: no spread to test against (never "separates")
                found.append(
                    Interaction(pair, name, baseline, effect, effect, effect, 0.0, None, None, "not tested")
                )
                continue
            df = se**4 / (se_base**4 / df_base + se_cell**4 / df_cell)  # Welch-Satterthwaite
            half = stats.t.ppf(1 - alpha / 2, df) * se
            p = float(2 * stats.t.sf(abs(effect) / se, df))
            found.append(
                Interaction(pair, name, baseline, effect, effect - half, effect + half, df, p, None, "")
            )
    tested = [i for i in found if i.p_raw is not None]
    adjusted = adjust([i.p_raw for i in tested], "holm") if tested else []
    by_id = {id(i): float(p) for i, p in zip(tested, adjusted, strict=True)}
    return [
        i
        if i.p_raw is None
        else Interaction(
            i.pair,
            i.regime,
            i.baseline,
            i.effect,
            i.low,
            i.high,
            i.df,
            i.p_raw,
            by_id[id(i)],
            "separates" if by_id[id(i)] < alpha else "not shown to separate",
        )  # fmt: skip
        for i in found
    ]


def interaction_table(found: list[Interaction], score: str) -> str:
    """The Markdown table of `interactions`: one row per pair and regime."""
    if not found:
        return "No pair is in the baseline regime and another: no interaction to test."
    scale = SCALE.get(score, 1.0)
    lines = [
        f"Interactions: each pair's effect in a regime minus its effect in {found[0].baseline} ({score}"
        f"{' points' if scale != 1.0 else ''}); one family of {sum(i.p_raw is not None for i in found)} "
        "tests, Holm-adjusted; a verdict that changes between regimes without a separating interaction is a "
        "crossing of alpha, not evidence that the regime matters.",
        "",
        "| pair (first - second) | regime | difference of differences [95%] | p | p_adj (Holm) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for i in found:
        p = "–" if i.p_raw is None else f"{i.p_raw:.3g}"
        p_adj = "–" if i.p_adjusted is None else f"{i.p_adjusted:.3g}"
        lines.append(
            f"| {i.pair[0]} - {i.pair[1]} | {i.regime} | {scale * i.effect:+.2f} "
            f"[{scale * i.low:+.2f}, {scale * i.high:+.2f}] | {p} | {p_adj} | **{i.verdict}** |"
        )
    return "\n".join(lines)


def table(regimes: dict[str, dict[tuple[str, str], Cell]], score: str) -> str:
    """The Markdown table: one row per pair (in the first regime's order, then any others), a column per
    regime; "changes" marks a pair whose verdict differs between regimes."""
    pairs = _pairs(regimes)
    scale = SCALE.get(score, 1.0)
    head = ["pair (first - second)", *regimes, "verdict changes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for pair in pairs:
        cells, verdicts = [], set()
        for regime in regimes.values():
            c = _pair_cell(regime, pair)
            if c is None:
                cells.append("–")
                continue
            verdicts.add(c.verdict)
            p = "–" if c.p_adjusted is None else f"{c.p_adjusted:.3g}"
            cells.append(
                f"{scale * c.effect:+.2f} [{scale * c.low:+.2f}, {scale * c.high:+.2f}], p_adj {p}, "
                f"**{c.verdict}** (MDE {scale * c.mde:.2f}, n={c.n})"
            )
        lines.append(
            f"| {pair[0]} - {pair[1]} | " + " | ".join(cells) + f" | {'yes' if len(verdicts) > 1 else ''} |"
        )
    families = "; ".join(
        f"{name}: {next(iter(cells.values())).family_size} tests" for name, cells in regimes.items() if cells
    )
    unit = " (points)" if scale != 1.0 else ""
    return (
        f"Score: {score}{unit}; each regime's p adjusted within its own family ({families}); MDE: the smallest "
        "difference its seeds detect with 80% power at the family's level.\n\n" + "\n".join(lines)
    )


def _regime_arg(text: str) -> tuple[str, Path]:
    name, sep, where = text.partition("=")
    if not sep or not name or not where:
        raise argparse.ArgumentTypeError(f"expected NAME=REPORT_DIR, got {text!r}")
    return name, Path(where)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("regimes", nargs="+", type=_regime_arg, metavar="NAME=REPORT_DIR")
    parser.add_argument(
        "--score",
        default="AUC",
        help="a score of the reports' verdicts, as its verdicts.csv names it (default AUC)",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    names = [name for name, _ in args.regimes]
    if len(set(names)) != len(names):
        print(f"twinkle_exp.report.regimes: a regime name is given twice: {names}", file=sys.stderr)
        return 2
    try:
        regimes = {name: read_regime(where, args.score) for name, where in args.regimes}
    except ValueError as exc:
        print(f"twinkle_exp.report.regimes: {exc}", file=sys.stderr)
        return 2
    text = table(regimes, args.score)
    if len(regimes) > 1:
        text += "\n\n" + interaction_table(interactions(regimes), args.score)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
