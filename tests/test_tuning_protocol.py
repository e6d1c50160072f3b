"""Tuning as a protocol (report/tuning.py, report/statistics/tuning_rule.py): the rule picks the setting
with the best tuning-seed scores on synthetic runs, never reads a verdict seed's run (even one that would
win), refuses protocols whose verdict seeds could choose or whose budgets differ, writes the verdict
sweep's commands, and draws the sensitivity curves from the tuning seeds' scores."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from twinkle_exp.report import tuning
from twinkle_exp.report.rendering.plots_sensitivity import sensitivity_curves
from twinkle_exp.report.statistics.tuning_rule import PointScore, score_points, select

PROTOCOL = {
    "name": "toy",
    "score": "final",
    "metric": "val/accuracy",
    "rule": "max_mean",
    "tuning_seeds": [100, 101],
    "verdict_seeds": [0, 1, 2],
    "common": ["trainer.max_steps=40"],
    "tuning_common": ["warmup.seed=1", "task.held_out_part=tuning"],  # a warm-start and items of its own
    "verdict_common": ["task.held_out_part=verdict"],
    "losses": {
        "grpo": {
            "overrides": ["loss=grpo"],
            "grid": {"optim.lr": ["1e-4", "3e-4"], "loss.clip_range": [0.1, 0.2]},
        },
        "gspo": {
            "overrides": ["loss=gspo"],
            "grid": {"optim.lr": ["1e-4", "3e-4"], "loss.clip_range": [3e-4, 3e-2]},
        },
    },
}


def _protocol(tmp_path, **changes):
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(PROTOCOL | changes, sort_keys=False))
    return path


def _job(sweep, overrides: list[str], seed: int, final: float) -> None:
    job = sweep / "_".join(o.replace("=", "-") for o in overrides) / f"seed{seed}"
    (job / ".hydra").mkdir(parents=True)
    full = [*overrides, f"seed={seed}"]
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in full))
    (job / "run.json").write_text(json.dumps({"status": "finished", "overrides": full, "seed": seed}))
    (job / "metrics.csv").write_text(f"step,val/accuracy\n0,0.3\n40,{final}\n")


# The truth the tuning should find: GRPO best at lr 3e-4 clip 0.2, GSPO at lr 1e-4 clip 3e-2.
TRUTH = {
    ("loss=grpo", "optim.lr=1e-4", "loss.clip_range=0.1"): 0.50,
    ("loss=grpo", "optim.lr=1e-4", "loss.clip_range=0.2"): 0.55,
    ("loss=grpo", "optim.lr=3e-4", "loss.clip_range=0.1"): 0.58,
    ("loss=grpo", "optim.lr=3e-4", "loss.clip_range=0.2"): 0.62,
    ("loss=gspo", "optim.lr=1e-4", "loss.clip_range=0.0003"): 0.40,  # written as Hydra would: 0.0003 = 3e-4
    ("loss=gspo", "optim.lr=1e-4", "loss.clip_range=0.03"): 0.60,
    ("loss=gspo", "optim.lr=3e-4", "loss.clip_range=0.0003"): 0.45,
    ("loss=gspo", "optim.lr=3e-4", "loss.clip_range=0.03"): 0.52,
}


def _sweep(tmp_path, verdict_bait: bool = True):
    sweep = tmp_path / "multirun"
    for point, final in TRUTH.items():
        for seed, noise in ((100, 0.01), (101, -0.01)):
            _job(sweep, list(point), seed, final + noise)
        if verdict_bait:  # verdict seeds at the worst point score far above anything: they must not count
            worst = point[:1] + (
                "optim.lr=1e-4",
                "loss.clip_range=0.1" if "grpo" in point[0] else "loss.clip_range=0.0003",
            )
            if point == worst:
                for seed in (0, 1, 2):
                    _job(sweep, list(point), seed, 0.99)
    return sweep


def test_the_rule_picks_the_best_setting_of_each_loss_on_the_tuning_seeds(tmp_path):
    p = tuning.load_protocol(str(_protocol(tmp_path)))
    runs = tuning.tuning_runs(p, [_sweep(tmp_path)])
    assert runs and {r.seed for r in runs} == {100, 101}
    chosen = {c.loss: dict(c.best.point) for c in tuning.choose(p, runs)}
    assert chosen == {
        "grpo": {"optim.lr": "3e-4", "loss.clip_range": "0.2"},
        "gspo": {"optim.lr": "1e-4", "loss.clip_range": "0.03"},
    }
    [grpo, _] = tuning.choose(p, runs)
    assert [round(s.mean, 6) for s in grpo.points] == [
        0.50,
        0.55,
        0.58,
        0.62,
    ]  # the sensitivity curve, grid order


def test_verdict_seed_runs_are_never_loaded(tmp_path, monkeypatch):
    p = tuning.load_protocol(str(_protocol(tmp_path)))
    sweep = _sweep(tmp_path)
    loaded = []
    real = tuning.load_run
    monkeypatch.setattr(tuning, "load_run", lambda job, where: loaded.append(job) or real(job, where))
    tuning.tuning_runs(p, [sweep])
    assert len(loaded) == 16 and not any(
        part.startswith("seed") and int(part[4:]) in (0, 1, 2) for j in loaded for part in j.parts
    )
    # And a verdict seed's run handed to the rule by mistake is refused, not used.
    bad = real(next(sweep.glob("**/seed0")), sweep)
    with pytest.raises(ValueError, match="seed 0 is not a tuning seed"):
        tuning.choose(p, [bad])


def test_the_command_writes_the_verdict_sweep(tmp_path, capsys):
    out = tmp_path / "choices.yaml"
    args = ["select", str(_protocol(tmp_path)), str(_sweep(tmp_path)), "--out", str(out), "--allow-edge"]
    assert tuning.main(args) == 0
    record = yaml.safe_load(out.read_text())
    assert record["choices"]["gspo"] == {"optim.lr": "1e-4", "loss.clip_range": "0.03"}
    [grpo, gspo] = [shlex.split(c) for c in record["verdict_commands"]]
    assert grpo[:4] == ["python", "-m", "twinkle_exp", "-m"]
    assert {"trainer.max_steps=40", "loss=grpo", "optim.lr=3e-4", "loss.clip_range=0.2", "seed=0,1,2"} <= set(
        grpo
    )
    assert "task.held_out_part=verdict" in grpo and "warmup.seed=1" not in grpo  # the verdict's own items
    assert "hydra.sweep.dir=multirun/toy/verdict" in gspo
    printed = capsys.readouterr().out
    assert "<- chosen" in printed
    # GRPO chose the largest of both its values, GSPO the smaller lr and the larger clip: all at the grid's edge.
    assert record["at_edge"] == {
        "grpo": ["optim.lr=3e-4 (the largest of 2)", "loss.clip_range=0.2 (the largest of 2)"],
        "gspo": ["optim.lr=1e-4 (the smallest of 2)", "loss.clip_range=0.03 (the largest of 2)"],
    }
    assert "⚠ chosen at the edge of the grid: optim.lr=3e-4 (the largest of 2)" in printed


def test_a_choice_at_an_edge_gets_the_extended_axis_and_no_verdict_commands(tmp_path, capsys):
    out = tmp_path / "choices.yaml"
    code = tuning.main(["select", str(_protocol(tmp_path)), str(_sweep(tmp_path)), "--out", str(out)])
    assert code == tuning.NOT_BRACKETED and not out.exists()
    captured = capsys.readouterr()
    assert "no verdict commands: 2 loss(es) chose at the edge of their grid" in captured.err
    # one step beyond each edge by the grid's own ratio: 3e-4 x 3, 0.2 x 2, 1e-4 / 3, 3e-2 x 100
    for line in ("grpo: optim.lr += [0.0009]", "grpo: loss.clip_range += [0.4]",
                 "gspo: optim.lr += [3.33e-05]", "gspo: loss.clip_range += [3]"):  # fmt: skip
        assert line in captured.err
    commands = [shlex.split(c) for c in captured.out.splitlines() if c.startswith("python -m twinkle_exp -m")]
    assert len(commands) == 4 and not any("seed=0,1,2" in c for c in commands)  # tuning seeds only
    grpo_lr = next(c for c in commands if "optim.lr=0.0009" in c)
    assert {"loss=grpo", "loss.clip_range=0.1,0.2", "seed=100,101", "warmup.seed=1"} <= set(grpo_lr)
    assert "task.held_out_part=tuning" in grpo_lr


def test_tuning_that_shares_the_verdict_s_warm_start_or_items_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"share their warm-start \(warmup.seed=0\)"):
        tuning.load_protocol(str(_protocol(tmp_path, tuning_common=["task.held_out_part=tuning"])))
    with pytest.raises(ValueError, match="share their held-out items"):
        tuning.load_protocol(str(_protocol(tmp_path, tuning_common=["warmup.seed=1"], verdict_common=[])))
    shared = _protocol(tmp_path, tuning_common=[], verdict_common=[], shared_with_verdict=True)
    assert tuning.load_protocol(str(shared)).shared_with_verdict  # said out loud: allowed


def test_a_choice_inside_the_grid_is_not_at_its_edge():
    g = tuning.LossGrid(
        "grpo", ["loss=grpo"], {"optim.lr": ["1e-4", "3e-4", "1e-3"], "advantage": ["group", "rloo"]}
    )
    inside = PointScore((("optim.lr", "3e-4"), ("advantage", "rloo")), 0.5, 0.0, 1)
    assert tuning.at_edge(g, inside) == []  # a categorical key has no edge
    edge = PointScore((("optim.lr", "0.001"), ("advantage", "group")), 0.5, 0.0, 1)
    assert tuning.at_edge(g, edge) == ["optim.lr=0.001 (the largest of 3)"]


def test_plan_gives_one_tuning_sweep_per_loss_with_equal_budgets(tmp_path, capsys):
    assert tuning.main(["plan", str(_protocol(tmp_path))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# toy: grid points per loss (grpo 4, gspo 4) x 2 tuning seeds")
    gspo = shlex.split(lines[2])
    assert {
        "loss=gspo",
        "optim.lr=1e-4,3e-4",
        "seed=100,101",
        "hydra.sweep.dir=multirun/toy/tuning/gspo",
    } <= set(gspo)


def test_protocols_that_let_a_verdict_seed_choose_or_give_unequal_budgets_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"seed\(s\) \[100\] are both tuning and verdict seeds"):
        tuning.load_protocol(str(_protocol(tmp_path, verdict_seeds=[100, 0])))
    losses = PROTOCOL["losses"] | {"sapo": {"overrides": ["loss=sapo"], "grid": {"loss.tau": [0.5, 1, 2]}}}
    with pytest.raises(ValueError, match="different sizes"):
        tuning.load_protocol(str(_protocol(tmp_path, losses=losses)))
    assert (
        tuning.load_protocol(str(_protocol(tmp_path, losses=losses, equal_budget=False))).losses[-1].name
        == "sapo"
    )
    with pytest.raises(ValueError, match="rule must be one of"):
        tuning.load_protocol(str(_protocol(tmp_path, rule="best")))
    with pytest.raises(ValueError, match="no tuning protocol"):
        tuning.load_protocol("no_such_protocol")


def test_a_grid_point_missing_a_tuning_seed_is_named(tmp_path):
    p = tuning.load_protocol(str(_protocol(tmp_path)))
    sweep = _sweep(tmp_path)
    runs = [
        r for r in tuning.tuning_runs(p, [sweep]) if not (r.seed == 101 and "optim.lr=3e-4" in r.overrides)
    ]
    with pytest.raises(
        ValueError, match="optim.lr=3e-4 loss.clip_range=0.1 has no finished run of tuning seed"
    ):
        tuning.choose(p, runs)


def test_the_rules_on_scores_written_out():
    scores = {
        (("lr", "a"),): {1: 0.60, 2: 0.60},
        (("lr", "b"),): {1: 0.70, 2: 0.54},
        (("lr", "c"),): {1: 0.60, 2: 0.60},
    }
    points = score_points(scores, [1, 2])
    assert [p.mean for p in points] == pytest.approx([0.60, 0.62, 0.60])
    assert select(points, "max_mean").point == (("lr", "b"),)
    # b's mean minus its standard error (0.62 - 0.08) is below a's 0.60: the steadier point wins; a before c.
    assert points[1].lower == pytest.approx(0.62 - 0.08) and select(points, "max_lower").point == (
        ("lr", "a"),
    )
    assert select([PointScore((), 0.5, 0.0, 1)], "max_lower").mean == 0.5
    with pytest.raises(ValueError, match="rule must be one of"):
        select(points, "median")


def test_the_named_protocol_gives_every_loss_the_same_budget():
    p = tuning.load_protocol("six_losses")
    assert {g.name for g in p.losses} == {"grpo", "bnpo", "drgrpo", "gspo", "sapo", "cispo"}
    assert {len(g.points()) for g in p.losses} == {9} and not set(p.tuning_seeds) & set(p.verdict_seeds)


def test_the_sensitivity_curves_are_the_tuning_seeds_scores_by_learning_rate(tmp_path, capsys):
    p, sweep = tuning.load_protocol(str(_protocol(tmp_path))), _sweep(tmp_path)
    [grpo, _] = tuning.choose(p, tuning.tuning_runs(p, [sweep]))
    curves = {c.label: c for c in sensitivity_curves(grpo.points, "optim.lr")}
    assert set(curves) == {"loss.clip_range=0.1", "loss.clip_range=0.2"}
    clip2 = curves["loss.clip_range=0.2"]
    assert clip2.x == [1e-4, 3e-4]
    assert clip2.mean == pytest.approx([0.55, 0.62])
    assert clip2.low == pytest.approx([0.54, 0.61]) and clip2.high == pytest.approx(
        [0.56, 0.63]
    )  # seeds +-0.01
    plot = tmp_path / "sensitivity.png"
    # the curves are drawn even when choices at the grid's edge hold back the verdict commands
    code = tuning.main(["select", str(_protocol(tmp_path)), str(sweep), "--plot", str(plot)])
    assert code == tuning.NOT_BRACKETED
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_plot_of_a_grid_without_the_learning_rate_is_refused_before_anything_is_written(tmp_path, capsys):
    losses = {
        name: {**spec, "grid": {"loss.clip_range": [0.1, 0.2]}} for name, spec in PROTOCOL["losses"].items()
    }
    out, plot = tmp_path / "choices.yaml", tmp_path / "sensitivity.png"
    args = ["select", str(_protocol(tmp_path, losses=losses)), str(_sweep(tmp_path)), "--out", str(out)]
    assert tuning.main([*args, "--plot", str(plot)]) == 2
    assert "optim.lr" in capsys.readouterr().err
    assert not out.exists() and not plot.exists()
