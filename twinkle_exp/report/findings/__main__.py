"""`python -m twinkle_exp.report.findings DIR [DIR ...] --finding NAME [--out OUT]`: a finding's verdict.

Loads the sweep's runs (as the report does), computes each named claim of `claims.CLAIMS` (load -> decide
-> plot -> render), writes `findings.md` and one plot per claim's metric into OUT (default DIR/findings), and
prints the verdict lines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from twinkle_exp import metric_names as M

from ..loading.runs import Run, load_runs
from ..rendering.plots import PlotSpec, plot_metric
from ..rendering.plots_pass_at_k import plot_pass_at_k
from .claims import CLAIMS, Claim
from .verdict import Verdict, decide

EXIT_USAGE = 2


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def arm_means(claim: Claim, runs: list[Run], arm: str, key: str) -> str:
    """Mean over the arm's finished runs of each run's mean of `key`, with the runs' range."""
    chosen = [r for r in runs if r.finished and arm in r.overrides and r.metrics.get(key)]
    values = [v for v in (np.mean([v for _, v in r.metrics[key]]) for r in chosen) if np.isfinite(v)]
    if not values:
        return "not logged"
    return f"{_fmt(float(np.mean(values)))} (runs {_fmt(min(values))}..{_fmt(max(values))})"


def effect_line(v: Verdict) -> str:
    """The test behind the verdict: difference, interval, p, the smallest detectable effect, the ratio."""
    p, c = v.pair, v.claim
    tested = (
        "not tested: a precondition is absent"
        if p.p_raw is None
        else f"p = {p.p_raw:.3g} ({p.n_first} vs {p.n_second} seeds; a single pre-declared primary test, not adjusted)"
    )
    line = (
        f"difference of means (treatment - control) **{_fmt(p.effect)}**, {p.confidence:.0%} {p.test} "
        f"interval [{_fmt(p.low)}, {_fmt(p.high)}], {tested}"
    )
    if c.effect == "ratio" and v.ratio is not None:
        line += f"; ratio of means {_fmt(v.ratio)} (treatment / control)"
    if p.p_noninferiority is not None:
        margin = p.margin or 0.0
        line += (
            f"; tested as non-inferiority (the claim is '{c.expected}'): worse by {_fmt(margin)} or more is "
            f"rejected at one-sided p = {p.p_noninferiority:.3g} (needs < {p.alpha / 2:g})"
        )
    elif p.margin is not None and p.p_equivalence is not None:
        line += f"; equivalence margin ±{_fmt(p.margin)}, TOST p = {p.p_equivalence:.3g}"
    line += (
        f"; detectable with 80% power at these seeds: {_fmt(p.mde)}; the paper's direction: {c.expected} 0"
    )
    if p.p_raw is not None:
        n = min(p.n_first, p.n_second)
        line += (
            f"; the level holds against nulls of one shape, not against a rare collapse: a collapse on 10% of "
            f"seeds is absent from {0.9**n:.0%} of {n}-seed samples, which no test at this seed count can see "
            "(docs/statistics.md)"
        )
    return line


def render(v: Verdict, runs: list[Run], plot: Path | None) -> str:
    """The Markdown section of one verdict."""
    c = v.claim
    lines = [
        f"### {c.name}: {v.verdict}",
        "",
        f"- source: {c.source}; per run: {c.describe} (`{c.key}`)"
        + ("" if v.threshold is None else f"; threshold {v.threshold:.1%}"),
    ]
    if v.treatment:
        lines += [
            f"- treatment `{c.treatment}`: {', '.join(_fmt(x) for x in v.treatment)} (mean {_fmt(np.mean(v.treatment))})",
            f"- control `{c.control}`: {', '.join(_fmt(x) for x in v.control)} (mean {_fmt(np.mean(v.control))})",
        ]
    for check in v.preconditions:
        state = "met" if check.met else "**absent**"
        lines.append(f"- precondition {check.name}: measured {_fmt(check.measured)}, {state}")
    if c.setting_lacks:
        lines.append(
            f"- known before the run, this setting lacks a condition of the paper's: {c.setting_lacks}"
        )
    if v.pair is not None:
        lines.append(f"- {effect_line(v)}")
    if c.diagnostics:
        lines.append("- diagnostics (mean over the run, averaged over seeds):")
        for key in c.diagnostics:
            lines.append(
                f"  - `{key}`: treatment {arm_means(c, runs, c.treatment, key)}; "
                f"control {arm_means(c, runs, c.control, key)}"
            )
    if plot is not None:
        lines += ["", f"![{c.key}]({plot.name})"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="twinkle-findings", description=__doc__.splitlines()[0])
    parser.add_argument("dirs", type=Path, nargs="+", help="sweep or run directories")
    parser.add_argument("--finding", action="append", required=True, choices=sorted(CLAIMS))
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: DIR/findings)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    missing = [d for d in args.dirs if not d.is_dir()]
    if missing:
        print(f"twinkle-findings: no such directory: {missing[0]}", file=sys.stderr)
        return EXIT_USAGE
    out = args.out or args.dirs[0] / "findings"
    runs = load_runs(args.dirs, skip=out)
    sections = []
    for name in args.finding:
        claim = CLAIMS[name]
        try:
            verdict = decide(claim, runs)
        except ValueError as exc:
            print(f"twinkle-findings: {exc}", file=sys.stderr)
            return EXIT_USAGE
        out.mkdir(parents=True, exist_ok=True)
        arms = {arm: [r for r in runs if arm in r.overrides] for arm in (claim.treatment, claim.control)}
        spec = PlotSpec(claim.key, f"{name}.png", f"{name}: {claim.key}", claim.key)
        plot = plot_metric(arms, spec, out)
        sections.append(render(verdict, runs, plot))
        if claim.key.startswith(M.VAL_PASS_AT):  # the pass@k claims: the whole curve against k, per arm
            curve = plot_pass_at_k(arms, out, filename=f"{name}_pass_at_k.png")
            if curve is not None:
                sections[-1] += f"\n![pass@k against k]({curve.name})\n"
        p = verdict.pair
        figures = (
            ""
            if p is None
            else f": difference {_fmt(p.effect)} [{_fmt(p.low)}, {_fmt(p.high)}]"
            + ("" if p.p_raw is None else f", p = {p.p_raw:.3g}")
        )
        print(f"{name}: {verdict.verdict}{figures}")
    (out / "findings.md").write_text("\n".join(sections), encoding="utf-8")
    print(f"wrote {out / 'findings.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
