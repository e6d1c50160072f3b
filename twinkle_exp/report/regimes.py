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
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

from .rendering.verdicts_file import CSV_NAME

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
    return Cell(-c.effect, -c.high, -c.low, c.p_adjusted, c.verdict, c.mde, c.n, c.family_size)


def table(regimes: dict[str, dict[tuple[str, str], Cell]], score: str) -> str:
    """The Markdown table: one row per pair (in the first regime's order, then any others), a column per
    regime; "changes" marks a pair whose verdict differs between regimes."""
    pairs: list[tuple[str, str]] = []
    for cells in regimes.values():
        for pair in cells:
            if pair not in pairs and (pair[1], pair[0]) not in pairs:
                pairs.append(pair)
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
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
