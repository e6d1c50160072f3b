"""`python -m twinkle_exp.report.scaling DIR [DIR ...] [--score val/accuracy] [--axis samples|tokens]
[--group-by KEYS]`: speed apart from ceiling, ScaleRL's sigmoid per run of each variant of a sweep.

Prints, per variant, A (the asymptote), B, C_mid (geometric mean) and R0 with their 95% t intervals over the
seeds, the mean |error| of the first-half fit on the second half of each run (what an extrapolated A is
worth: runs that have not bent over give large ones), the AUC, and whether ranking by A and by AUC agree.
Method: [Statistics, speed and ceiling](../../docs/statistics.md#speed-and-ceiling-scalerls-sigmoid)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from twinkle_exp import metric_names as M

from .loading.runs import load_runs
from .pipeline import Refusal, group
from .statistics.intervals import Interval
from .statistics.scaling_curves import AXES, fit_variant, rankings_agree


def _show(i: Interval, fmt: str = ".3g") -> str:
    bounds = "" if i.low is None else f" [{i.low:{fmt}}, {i.high:{fmt}}]"
    # A fit that ended at its search bound gives a limit, not an estimate: say so beside the figure.
    return f"{i.value:{fmt}}{bounds}" + (
        " (at the fit's bound: a limit, not an estimate)" if i.at_bound else ""
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--score", default=M.VAL_ACCURACY)
    parser.add_argument("--axis", choices=AXES, default="samples")
    parser.add_argument("--group-by", default=None, help="comma-separated config keys naming a variant")
    args = parser.parse_args(argv)
    try:
        runs = load_runs(args.dirs)
        if not runs:
            raise Refusal(f"no runs found under {', '.join(map(str, args.dirs))}")
        variants = group(
            [r for r in runs if r.finished], None if args.group_by is None else args.group_by.split(",")
        )
    except Refusal as exc:
        print(f"twinkle_exp.report.scaling: {exc}", file=sys.stderr)
        return 2
    fitted = {}
    for name, members in sorted(variants.items()):
        try:
            fitted[name] = fit_variant(members, args.score, args.axis)
        except ValueError as exc:
            print(f"{name}: no fit ({exc})")
    for name, v in fitted.items():
        i = v.intervals
        print(
            f"{name}: {len(v.fits)} runs; A {_show(i['A'])}  B {_show(i['B'])}  C_mid {_show(i['C_mid'])} "
            f"{args.axis}  R0 {_show(i['R0'])}; first half -> second half mean |error| "
            f"{_show(v.extrapolation_error)}; AUC {_show(v.auc)}"
        )
    if len(fitted) > 1:
        agree = rankings_agree(fitted)
        print(f"ranking by A {'agrees' if agree else 'does not agree'} with the ranking by AUC")
    return 0


if __name__ == "__main__":
    sys.exit(main())
