"""Tuning as a protocol: each loss tuned on its own seeds, the verdict run on fresh ones that chose nothing.

    python -m twinkle_exp.report.tuning plan PROTOCOL            the tuning sweeps' commands, one per loss
    python -m twinkle_exp.report.tuning select PROTOCOL DIR ...  each loss's best on the tuning seeds, and the
                                                                 verdict sweep's commands [--out FILE.yaml]
                                                                 [--plot FILE.png: the sensitivity curves]

PROTOCOL is a YAML file, or a name in `twinkle_exp/report/protocols/` (`six_losses` -> protocols/six_losses.yaml):

    name: six_losses_tuned
    score: auc                  # auc | final | last_quarter, of `metric`
    metric: val/accuracy
    rule: max_mean              # max_mean | max_lower (report/statistics/tuning_rule.py)
    tuning_seeds: [100, 101]
    verdict_seeds: [0, 1, 2]
    common: [trainer.max_steps=400]       # every job, tuning and verdict
    losses:
      gspo:
        overrides: [loss=gspo]            # what makes the job this loss's
        grid: {optim.lr: [3e-5, 1e-4, 3e-4], loss.clip_range: [3e-4, 3e-3, 3e-2]}

    tuning_common: [warmup.seed=1, task.held_out_part=tuning]   # tuning jobs only
    verdict_common: [task.held_out_part=verdict]                # verdict jobs only

The tuning jobs must differ from the verdict's in the warm-start (`warmup.seed`) and in the held-out items
(`task.held_out_part=tuning` against `verdict`): a choice scored on the verdict's checkpoint or test items
would be scored on the test set. A protocol that keeps them shared says `shared_with_verdict: true` (the
published six_losses_tuned of before, kept as what it was). A choice at the edge of its grid on a numeric
axis did not bracket the optimum: `select` then prints no verdict commands but the axis extended one step
beyond that edge (the grid's own ratio) with the tuning sweep that scores it, and exits 3; `--allow-edge`
prints them anyway, marked. Every loss must get the same number of grid points (the same tuning budget;
`equal_budget: false` allows otherwise, and the plan states each loss's). `select` reads a job's seed first and loads the metrics of the
tuning seeds' jobs only: a verdict seed's run, wherever it lies, never enters a choice. It refuses a verdict
seed that is also a tuning seed, and a grid point without every tuning seed finished.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from twinkle_exp import metric_names as M
from twinkle_exp.summary.series import accuracy_auc, last_quarter_mean, last_value
from twinkle_exp.tracking.metrics_csv import Series
from twinkle_exp.tracking.run_json import RUN_JSON, override_key

from .loading.run_files import OVERRIDES_FILE, read_overrides, read_run_json, seed_of
from .loading.runs import Run, find_job_dirs, load_run
from .rendering.plots_sensitivity import plot_sensitivity
from .statistics.tuning_rule import RULES, PointScore, score_points, select

SCORES: dict[str, Callable[[Series], float]] = {
    "auc": accuracy_auc,
    "final": last_value,
    "last_quarter": last_quarter_mean,
}
SENSITIVITY_KEY = "optim.lr"  # the sensitivity curves' x axis
NOT_BRACKETED = 3  # `select`'s exit status when a choice sits at its grid's edge (no verdict commands)
# The named protocols ship with the package (twinkle_exp/report/protocols/), so an installed wheel runs them.
NAMED = Path(__file__).resolve().parent / "protocols"

Point = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class LossGrid:
    name: str
    overrides: list[str]
    grid: dict[str, list[str]]  # key -> values, as written

    def points(self) -> list[Point]:
        keys = list(self.grid)
        return [tuple(zip(keys, values, strict=True)) for values in itertools.product(*self.grid.values())]


@dataclass(frozen=True)
class Protocol:
    name: str
    score: str
    metric: str
    rule: str
    tuning_seeds: list[int]
    verdict_seeds: list[int]
    common: list[str]
    losses: list[LossGrid]
    equal_budget: bool = True
    tuning_common: list[str] = dataclasses.field(default_factory=list)  # the tuning jobs' own overrides
    verdict_common: list[str] = dataclasses.field(default_factory=list)  # the verdict jobs' own overrides
    shared_with_verdict: bool = False  # whether tuning may share the verdict's warm-start and items


def _values(raw: Any) -> list[str]:
    return [str(v) for v in (raw if isinstance(raw, list) else [raw])]


def load_protocol(where: str) -> Protocol:
    """The protocol at path `where`, or named `where` in protocols/; ValueError naming what is wrong."""
    path = Path(where)
    if not path.is_file():
        path = NAMED / f"{where}.yaml"
    if not path.is_file():
        raise ValueError(f"no tuning protocol {where!r} (not a file, nor {path})")
    raw = yaml.safe_load(path.read_text()) or {}
    missing = [k for k in ("name", "tuning_seeds", "verdict_seeds", "losses") if k not in raw]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    losses = [
        LossGrid(
            str(name),
            _values(spec.get("overrides", [])),
            {str(k): _values(v) for k, v in spec["grid"].items()},
        )
        for name, spec in raw["losses"].items()
    ]
    p = Protocol(
        name=str(raw["name"]),
        score=str(raw.get("score", "auc")),
        metric=str(raw.get("metric", M.VAL_ACCURACY)),
        rule=str(raw.get("rule", "max_mean")),
        tuning_seeds=[int(s) for s in raw["tuning_seeds"]],
        verdict_seeds=[int(s) for s in raw["verdict_seeds"]],
        common=_values(raw.get("common", [])),
        losses=losses,
        equal_budget=bool(raw.get("equal_budget", True)),
        tuning_common=_values(raw.get("tuning_common", [])),
        verdict_common=_values(raw.get("verdict_common", [])),
        shared_with_verdict=bool(raw.get("shared_with_verdict", False)),
    )
    check_protocol(p, str(path))
    return p


def check_protocol(p: Protocol, where: str) -> None:
    """Refuse a protocol whose verdict seeds could have chosen, or whose losses get unequal budgets."""
    problems = []
    if p.score not in SCORES:
        problems.append(f"score must be one of {sorted(SCORES)}, got {p.score!r}")
    if p.rule not in RULES:
        problems.append(f"rule must be one of {RULES}, got {p.rule!r}")
    shared = sorted(set(p.tuning_seeds) & set(p.verdict_seeds))
    if shared:
        problems.append(
            f"seed(s) {shared} are both tuning and verdict seeds: a verdict seed must never choose"
        )
    if not p.tuning_seeds or not p.verdict_seeds:
        problems.append("tuning_seeds and verdict_seeds must both be non-empty")
    budgets = {g.name: len(g.points()) for g in p.losses}
    if p.equal_budget and len(set(budgets.values())) > 1:
        problems.append(
            f"the losses' grids have different sizes {budgets}: set equal_budget: false to allow it"
        )
    for g in p.losses:
        for key in g.grid:
            if override_key(key) == "seed":
                problems.append(f"{g.name}: the grid may not hold the seed")
    if not p.shared_with_verdict:
        tuning, verdict = _assignments(p.common + p.tuning_common), _assignments(p.common + p.verdict_common)
        for key, default, what in (
            ("warmup.seed", "0", "warm-start"),
            ("task.held_out_part", "all", "held-out items"),
        ):
            if tuning.get(key, default) == verdict.get(key, default) or "all" in (
                tuning.get(key),
                verdict.get(key),
            ):
                problems.append(
                    f"tuning and verdict jobs share their {what} ({key}={tuning.get(key, default)}): give "
                    f"tuning_common and verdict_common different {key} (held-out parts tuning / verdict), or "
                    "say shared_with_verdict: true"
                )
    if problems:
        raise ValueError(f"{where}: " + "; ".join(problems))


def _sweep(p: Protocol, phase: str, loss: str, points: list[str], seeds: list[int]) -> str:
    parts = ["python", "-m", "twinkle_exp", "-m", *p.common, *points]
    parts += [f"seed={','.join(map(str, seeds))}", f"sweep_name={p.name}_{phase}"]
    parts.append(f"hydra.sweep.dir=multirun/{p.name}/{phase}/{loss}")
    return shlex.join(parts)


def plan_commands(p: Protocol) -> list[str]:
    """One tuning multirun per loss: its overrides, its grid, the tuning seeds."""
    out = []
    for g in p.losses:
        grid = [f"{k}={','.join(v)}" for k, v in g.grid.items()]
        out.append(_sweep(p, "tuning", g.name, [*p.tuning_common, *g.overrides, *grid], p.tuning_seeds))
    return out


def extended(g: LossGrid, best: PointScore) -> dict[str, str]:
    """For each numeric key whose choice is at the grid's edge, the value one step beyond it, by the ratio of
    the edge to its neighbour (log-spaced grids stay log-spaced; a grid through 0 steps by the difference)."""
    out = {}
    for key, value in best.point:
        try:
            tried, chosen = sorted({float(v) for v in g.grid[key]}), float(value)
        except ValueError:
            continue
        if len(tried) < 2 or chosen not in (tried[0], tried[-1]):
            continue
        edge, neighbour = (tried[-1], tried[-2]) if chosen == tried[-1] else (tried[0], tried[1])
        ratio = edge / neighbour if neighbour and edge / neighbour > 0 else None
        beyond = edge * ratio if ratio and not math.isclose(ratio, 1.0) else edge + (edge - neighbour)
        out[key] = f"{beyond:.3g}"
    return out


def extension_commands(p: Protocol, choices: list[Choice]) -> list[str]:
    """For each loss chosen at an edge, the tuning sweep of its extended axis (the other axes as tried)."""
    by_name, out = {g.name: g for g in p.losses}, []
    for c in choices:
        g = by_name[c.loss]
        for key, beyond in extended(g, c.best).items():
            grid = [f"{k}={beyond if k == key else ','.join(v)}" for k, v in g.grid.items()]
            out.append(
                _sweep(
                    p,
                    "tuning",
                    f"{c.loss}_{key}_{beyond}",
                    [*p.tuning_common, *g.overrides, *grid],
                    p.tuning_seeds,
                )
            )
    return out


def _assignments(overrides: list[str]) -> dict[str, str]:
    return {override_key(o): o.split("=", 1)[1] for o in overrides if "=" in o}


def _same(a: str, b: str) -> bool:
    """Override values that name the same setting (3e-4 and 0.0003 alike)."""
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


def _pairs(overrides: list[str]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in (o.split("=", 1) for o in overrides if "=" in o)]


def _matches(given: dict[str, str], wanted: list[tuple[str, str]] | Point) -> bool:
    """Whether a run's overrides (`given`: key -> value) set every one of `wanted`."""
    return all(override_key(k) in given and _same(given[override_key(k)], v) for k, v in wanted)


def tuning_runs(p: Protocol, dirs: list[Path]) -> list[Run]:
    """The finished runs of the tuning seeds under `dirs`; every other job is left unread past its seed."""
    runs = []
    for sweep_dir in dirs:
        for job in find_job_dirs(sweep_dir):
            _, info = read_run_json(job / RUN_JSON)
            overrides = info.get("overrides")
            if not isinstance(overrides, list):
                overrides = read_overrides(job / OVERRIDES_FILE)
            seed = seed_of(info.get("seed"), [str(o) for o in overrides])
            if seed in p.tuning_seeds:
                run = load_run(job, sweep_dir)
                if run.finished:
                    runs.append(run)
    return runs


@dataclass(frozen=True)
class Choice:
    loss: str
    best: PointScore
    points: list[PointScore]  # every grid point's, in grid order: the sensitivity curve


def choose(p: Protocol, runs: list[Run]) -> list[Choice]:
    """Each loss's best grid point by the protocol's rule, from `runs` (the tuning seeds' only)."""
    fn, choices = SCORES[p.score], []
    for g in p.losses:
        scores: dict[Point, dict[int, float]] = {point: {} for point in g.points()}
        for run in runs:
            if run.seed not in p.tuning_seeds:
                raise ValueError(f"{run.name}: seed {run.seed} is not a tuning seed; it may not choose")
            given = _assignments(run.overrides)
            if not _matches(given, _pairs(g.overrides)) or p.metric not in run.metrics:
                continue
            for point in scores:
                if _matches(given, point):
                    scores[point][run.seed] = fn(run.metrics[p.metric])
        points = score_points(scores, p.tuning_seeds)
        choices.append(Choice(g.name, select(points, p.rule), points))
    return choices


def at_edge(g: LossGrid, best: PointScore) -> list[str]:
    """The numeric keys of `g` whose chosen value (`best`'s) is the smallest or largest the grid tried, each
    as "key=value (the largest of 3)": there the grid did not bracket the optimum, which may lie beyond it."""
    out = []
    for key, value in best.point:
        try:
            tried = sorted({float(v) for v in g.grid[key]})
            chosen = float(value)
        except ValueError:  # a categorical key has no edge
            continue
        if len(tried) > 1 and chosen in (tried[0], tried[-1]):
            side = "largest" if chosen == tried[-1] else "smallest"
            out.append(f"{key}={value} (the {side} of {len(tried)})")
    return out


def verdict_commands(p: Protocol, choices: list[Choice]) -> list[str]:
    """The verdict sweep: each loss at its chosen point, on the verdict seeds, into one sweep directory."""
    by_name = {g.name: g for g in p.losses}
    out = []
    for c in choices:
        chosen = [f"{k}={v}" for k, v in c.best.point]
        parts = [
            "python",
            "-m",
            "twinkle_exp",
            "-m",
            *p.common,
            *p.verdict_common,
            *by_name[c.loss].overrides,
        ]
        parts += chosen
        parts += [f"seed={','.join(map(str, p.verdict_seeds))}", f"sweep_name={p.name}_verdict"]
        parts.append(f"hydra.sweep.dir=multirun/{p.name}/verdict")
        out.append(shlex.join(parts))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("plan").add_argument("protocol")
    chooser = sub.add_parser("select")
    chooser.add_argument("protocol")
    chooser.add_argument("dirs", nargs="+", type=Path)
    chooser.add_argument("--out", type=Path, default=None, help="the choices and verdict commands, as YAML")
    chooser.add_argument(
        "--allow-edge",
        action="store_true",
        help="print the verdict commands even for choices at a grid's edge",
    )
    chooser.add_argument(
        "--plot",
        type=Path,
        default=None,
        help=f"the sensitivity curves (score against {SENSITIVITY_KEY}), as PNG",
    )
    args = parser.parse_args(argv)
    try:
        p = load_protocol(args.protocol)
        if args.command == "plan":
            budgets = ", ".join(f"{g.name} {len(g.points())}" for g in p.losses)
            print(f"# {p.name}: grid points per loss ({budgets}) x {len(p.tuning_seeds)} tuning seeds")
            print("\n".join(plan_commands(p)))
            return 0
        if args.plot is not None:
            lacking = [g.name for g in p.losses if SENSITIVITY_KEY not in g.grid]
            if lacking:
                raise ValueError(
                    f"--plot draws the score against {SENSITIVITY_KEY}, which {lacking} do not sweep"
                )
        choices = choose(p, tuning_runs(p, args.dirs))
    except ValueError as exc:
        print(f"twinkle_exp.report.tuning: {exc}", file=sys.stderr)
        return 2
    grids = {g.name: g for g in p.losses}
    edges = {c.loss: e for c in choices if (e := at_edge(grids[c.loss], c.best))}
    for c in choices:
        print(f"{c.loss}: {p.score} of {p.metric} by grid point, over tuning seeds {p.tuning_seeds}")
        for s in c.points:
            mark = "  <- chosen" if s is c.best else ""
            label = " ".join(f"{k}={v}" for k, v in s.point)
            print(f"  {label:40s} mean {s.mean:.4f}  sd {s.sd:.4f}{mark}")
        if c.loss in edges:
            print(
                f"  ⚠ chosen at the edge of the grid: {', '.join(edges[c.loss])}; the best may lie beyond it"
            )
    if args.plot is not None:
        plot_sensitivity(
            {c.loss: c.points for c in choices}, {c.loss: c.best for c in choices}, args.plot, SENSITIVITY_KEY,
            score=f"{p.score} of {p.metric}", seeds=len(p.tuning_seeds),
        )  # fmt: skip
        print(f"sensitivity curves: {args.plot}")
    if edges and not args.allow_edge:
        print(
            f"no verdict commands: {len(edges)} loss(es) chose at the edge of their grid, which did not bracket "
            "the optimum. Add each value below to its loss's grid in the protocol, run these tuning sweeps, and "
            "select again with every tuning directory (or pass --allow-edge to publish the choices as at-edge):",
            file=sys.stderr,
        )
        for c in choices:
            for key, beyond in extended(grids[c.loss], c.best).items():
                print(f"  {c.loss}: {key} += [{beyond}]", file=sys.stderr)
        print("\n".join(extension_commands(p, choices)))
        return NOT_BRACKETED
    commands = verdict_commands(p, choices)
    print("\n".join(commands))
    if args.out is not None:
        record = {
            "protocol": p.name,
            "rule": p.rule,
            "tuning_seeds": p.tuning_seeds,
            "choices": {c.loss: {k: v for k, v in c.best.point} for c in choices},
            "at_edge": edges,
            "verdict_commands": commands,
        }
        args.out.write_text(yaml.safe_dump(record, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
