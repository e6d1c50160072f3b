"""Sweeps: conf/sweep/*.yaml (Hydra), sweeps/*.wandb.yaml (wandb agent), conf/hydra/launcher/*, real multiruns.

Fast tests compose configs in-process; the slow ones run `python -m twinkle_exp -m ...` in a tmp working
directory with wandb offline and read back each job's run.json, Hydra files, cli.log and wandb transaction log.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

import twinkle_exp.cli  # noqa: F401  (registers the config schemas, as the app does)
from twinkle_exp.config.checks import check_config
from twinkle_exp.loss import LOSSES

REPO = Path(__file__).resolve().parents[1]
SWEEP_DIR = REPO / "conf" / "sweep"
LAUNCHER_DIR = REPO / "conf" / "hydra" / "launcher"
WANDB_SWEEPS = sorted((REPO / "sweeps").glob("*.wandb.yaml"))
HYDRA_SWEEPS = sorted(p.stem for p in SWEEP_DIR.glob("*.yaml"))
GRID_SWEEPS = [s for s in HYDRA_SWEEPS if s != "optuna"]
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}")


def test_the_expected_sweeps_exist():
    assert set(HYDRA_SWEEPS) >= {"six_losses", "six_losses_quick", "sapo_tau", "clip_range", "optuna"}
    assert {p.name for p in WANDB_SWEEPS} >= {"six_losses.wandb.yaml", "sapo_tau.wandb.yaml"}
    assert {p.stem for p in LAUNCHER_DIR.glob("*.yaml")} >= {"slurm", "local_parallel"}


# --- in-process composition ----------------------------------------------------------------------------
def _compose(overrides: list[str], hydra: bool = False) -> DictConfig:
    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=hydra)


def _assert_job_config(cfg: DictConfig, override: str) -> None:
    """The composed job config holds what `key=value` asked for, passes the schema check, and builds its loss."""
    parsed = OverridesParser.create().parse_overrides([override])[0]
    key, value = parsed.key_or_group, parsed.value()  # typed as Hydra reads it (1e-05 is a float)
    if key == "loss":
        assert cfg.loss._target_.rsplit(".", 1)[1] == LOSSES[value].__name__, (override, cfg.loss)
    elif key in ("sweep", "experiment"):  # presets: checked by the config check and the loss built below
        pass
    elif key in ("advantage", "task"):  # an option of conf/<group>: the composed group holds its own keys
        option = yaml.safe_load((REPO / "conf" / key / f"{value}.yaml").read_text()) or {}
        option.pop("defaults", None)
        assert {k: cfg[key][k] for k in option} == option, (override, cfg[key])
    else:
        got = OmegaConf.select(cfg, key, throw_on_missing=True)
        assert got is not None, f"{key} is not a config key"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert math.isclose(float(got), float(value), rel_tol=1e-9), (key, got, value)
        else:
            assert got == value, (key, got, value)
    check_config(cfg)
    instantiate(cfg.loss)  # the loss class accepts the value (e.g. SAPO refuses tau <= 0)


def _grid(params: dict[str, str]) -> dict[str, list[str]]:
    """{key: [key=value, ...]} of a basic-sweeper params block, parsed by Hydra's own override parser."""
    parser = OverridesParser.create()
    grid = {}
    for key, value in params.items():
        [override] = parser.parse_overrides([f"{key}={value}"])
        values = list(override.sweep_string_iterator()) if override.is_sweep_override() else [str(value)]
        grid[key] = [f"{key}={v}" for v in values]
    return grid


@pytest.mark.parametrize("name", HYDRA_SWEEPS)
def test_sweep_file_composes_with_its_name_dir_and_header(name):
    text = (SWEEP_DIR / f"{name}.yaml").read_text()
    assert text.startswith("# @package _global_\n")
    assert f"python -m twinkle_exp -m +sweep={name}" in text, "the header comment shows the command"
    assert "python -m twinkle_exp.report multirun/" in text, "the header comment shows how to report"

    cfg = _compose([f"+sweep={name}"], hydra=True)
    assert cfg.sweep_name == name
    assert cfg.hydra.sweeper.params, "no hydra.sweeper.params"
    sweep_dir = cfg.hydra.sweep.dir  # resolves ${now:...}
    assert sweep_dir.startswith(f"multirun/{name}/"), sweep_dir
    assert TIMESTAMP.fullmatch(sweep_dir.rsplit("/", 1)[1]), sweep_dir
    assert "sweep" in cfg.hydra.job.config.override_dirname.exclude_keys


@pytest.mark.parametrize("name", GRID_SWEEPS)
def test_grid_sweep_values_name_real_keys_and_choices(name):
    """Every swept value composes as an override of a job (each key varied from the grid's first point)."""
    cfg = _compose([f"+sweep={name}"], hydra=True)
    assert "BasicSweeper" in cfg.hydra.sweeper._target_
    grid = _grid(OmegaConf.to_container(cfg.hydra.sweeper.params, resolve=True))  # as the sweeper gets it
    assert len(grid) >= 2 and all(len(v) >= 2 for v in grid.values()), grid
    base = [values[0] for values in grid.values()]
    composed = 0
    for i, values in enumerate(grid.values()):
        for value in values[1 if i else 0 :]:
            point = [*base[:i], value, *base[i + 1 :]]
            job = _compose([f"+sweep={name}", *point])
            for override in point:
                _assert_job_config(job, override)
            composed += 1
    assert composed == sum(len(v) for v in grid.values()) - len(grid) + 1


def test_grids_are_what_their_headers_say():
    def grid(name):
        return {
            k: [o.split("=", 1)[1] for o in v]
            for k, v in _grid(
                OmegaConf.to_container(
                    _compose([f"+sweep={name}"], hydra=True).hydra.sweeper.params, resolve=True
                )
            ).items()
        }

    six = ["bnpo", "cispo", "drgrpo", "grpo", "gspo", "sapo"]
    presets = grid("six_losses")["+experiment"]
    assert sorted(p.removesuffix("_paper") for p in presets) == six and grid("six_losses")["seed"] == [
        str(seed) for seed in range(10)
    ]
    # each loss as its paper defines it: Dr.GRPO with unscaled advantages, GSPO at its own clip range
    drgrpo = _compose(["+sweep=six_losses", "+experiment=drgrpo_paper"])
    assert drgrpo.loss._target_.endswith("DRGRPOLoss") and drgrpo.advantage.scale == "none"
    gspo = _compose(["+sweep=six_losses", "+experiment=gspo_paper"])
    assert gspo.loss._target_.endswith("GSPOLoss") and gspo.loss.clip_range == 3e-4
    assert sorted(grid("six_losses_quick")["loss"]) == six and grid("six_losses_quick")["seed"] == ["0", "1"]
    # the registry's list, not one of its own; a loss that needs whole-group minibatches runs with its recipe
    assert grid("zoo")["loss"] == [name for name, cls in LOSSES.items() if not cls.whole_groups]
    assert [float(t) for t in grid("sapo_tau")["loss.tau"]] == [0.25, 0.5, 1.0, 2.0]
    assert _compose(["+sweep=sapo_tau"]).loss._target_ == "twinkle_exp.loss.SAPOLoss"
    clip = grid("clip_range")
    assert sorted(clip["loss"]) == sorted(set(six) - {"sapo"})
    assert [float(c) for c in clip["loss.clip_range"]] == [0.1, 0.2, 0.3]
    quick = _compose(["+sweep=six_losses_quick"])
    default = _compose([])
    assert quick.trainer.max_steps < default.trainer.max_steps
    # The quick sweep keeps the warm-start and the task, so it shares the full sweep's cached warm-start.
    assert quick.warmup == default.warmup and quick.task == default.task


def test_optuna_sweep_uses_optuna_maximises_and_its_params_parse():
    from hydra_plugins.hydra_optuna_sweeper._impl import create_optuna_distribution_from_override
    from optuna.distributions import LogUniformDistribution, UniformDistribution

    cfg = _compose(["+sweep=optuna"], hydra=True)
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper")
    assert sweeper.direction == "maximize"  # the app returns the final greedy validation accuracy
    assert sweeper.study_name and sweeper.n_trials >= 10
    assert sweeper.sampler._target_ == "optuna.samplers.TPESampler" and sweeper.sampler.seed is not None
    parser = OverridesParser.create()
    dists = {
        key: create_optuna_distribution_from_override(parser.parse_overrides([f"{key}={value}"])[0])
        for key, value in sweeper.params.items()
    }
    assert set(dists) == {"optim.lr", "loss.clip_range", "loss.beta"}
    assert isinstance(dists["optim.lr"], LogUniformDistribution)
    assert isinstance(dists["loss.clip_range"], UniformDistribution)
    assert isinstance(dists["loss.beta"], UniformDistribution)
    for corner in ([d.low for d in dists.values()], [d.high for d in dists.values()]):
        point = [f"{key}={value!r}" for key, value in zip(dists, corner, strict=True)]
        job = _compose(["+sweep=optuna", *point])
        for override in point:
            _assert_job_config(job, override)


@pytest.mark.parametrize("name", ["slurm", "local_parallel"])
def test_launcher_config_composes(name):
    cfg = _compose([f"hydra/launcher={name}", "+sweep=six_losses"], hydra=True)
    launcher = cfg.hydra.launcher
    if name == "slurm":
        assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
        assert launcher.gpus_per_node >= 1 and launcher.tasks_per_node >= 1
        assert launcher.timeout_min >= 60 and launcher.cpus_per_task >= 1 and launcher.mem_gb >= 8
        assert "partition" in launcher
        assert launcher.submitit_folder.startswith("multirun/six_losses/")  # inside the sweep dir
        assert launcher.setup == ["export OMP_NUM_THREADS=8"]
    else:
        assert launcher._target_.endswith("joblib_launcher.JoblibLauncher")
        assert launcher.n_jobs == 2


# --- wandb agent sweep files ---------------------------------------------------------------------------
def _agent_overrides(params: dict) -> list[list[str]]:
    """Every run the agent of a grid sweep would start, as the Hydra overrides it passes (${args_no_hyphens})."""
    from wandb.sdk.launch.sweeps.utils import create_sweep_command_args

    keys = list(params)
    choices = [spec["values"] if "values" in spec else [spec["value"]] for spec in params.values()]
    return [
        create_sweep_command_args({"args": {k: {"value": v} for k, v in zip(keys, combo, strict=True)}})[
            "args_no_hyphens"
        ]
        for combo in itertools.product(*choices)
    ]


@pytest.mark.parametrize("path", WANDB_SWEEPS, ids=lambda p: p.name)
def test_wandb_sweep_file_runs_the_app_with_hydra_overrides(path, monkeypatch):
    monkeypatch.setenv(
        "WANDB_API_KEY", "0" * 40
    )  # an agent runs where wandb is logged in (start-up checks it)
    spec = yaml.safe_load(path.read_text())
    assert spec["method"] in ("grid", "random", "bayes")
    command = spec["command"]
    assert "${args_no_hyphens}" in command
    assert command[command.index("-m") + 1] == "twinkle_exp"
    params = spec["parameters"]
    assert all(("value" in p) != ("values" in p) for p in params.values()), params
    assert params["logger.mode"]["value"] == "online", "agent runs must report to the sweep"
    runs = _agent_overrides(params)
    if spec["method"] == "grid":
        assert len(runs) == math.prod(len(p.get("values", [0])) for p in params.values())
    for overrides in (runs[0], runs[-1]):
        cfg = _compose(overrides)
        for override in overrides:
            if override.startswith("logger.mode="):
                assert cfg.logger.mode == "online"
            else:
                _assert_job_config(cfg, override)


def test_readme_lists_every_sweep_with_its_command():
    readme = (REPO / "sweeps" / "README.md").read_text()
    for name in HYDRA_SWEEPS:
        assert f"python -m twinkle_exp -m +sweep={name}" in readme, name
    for path in WANDB_SWEEPS:
        assert f"wandb sweep sweeps/{path.name}" in readme, path.name
    assert "python -m twinkle_exp.report multirun/" in readme
    assert "hydra/launcher=local_parallel" in readme and "hydra/launcher=slurm" in readme


# --- real multiruns ------------------------------------------------------------------------------------
def _multirun(cwd: Path, env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "twinkle_exp", "-m", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _sweep_dir(cwd: Path) -> Path:
    found = sorted({p.parent.parent for p in cwd.glob("multirun/**/run.json")})
    assert len(found) == 1, found
    return found[0]


def _jobs(sweep_dir: Path) -> dict[str, Path]:
    """{job directory name: path}, each with its run.json."""
    return {p.parent.name: p.parent for p in sorted(sweep_dir.glob("*/run.json"))}


def _wandb_log(job: Path) -> Path:
    runs = sorted(job.glob("wandb/offline-run-*"))
    assert len(runs) == 1, f"{job}: {runs}"  # one wandb run per job, none from another job
    [log] = runs[0].glob("run-*.wandb")
    return log


def _check_jobs(sweep_dir: Path, expected: dict[str, dict], group: str, read_wandb_run) -> list[dict]:
    """Each job finished with its own config, CSV and wandb run; returns the wandb runs."""
    jobs = _jobs(sweep_dir)
    assert sorted(jobs) == sorted(expected), sorted(jobs)
    runs = []
    for dirname, want in expected.items():
        job = jobs[dirname]
        status = json.loads((job / "run.json").read_text())
        assert status["status"] == "finished", status
        assert status["seed"] == want["seed"] and status["loss"] == want["loss"]
        assert Path(status["final"]["output_dir"]).resolve() == job.resolve()
        assert status["final"]["steps"] == 4  # debug=fast: trainer.max_steps
        config = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
        assert config["seed"] == want["seed"]
        assert config["loss"]["_target_"].rsplit(".", 1)[1] == LOSSES[want["loss"]].__name__
        assert (job / "metrics.csv").read_text().count("\n") > 1

        run = read_wandb_run(_wandb_log(job))
        assert run["exit"], f"{dirname}: wandb.finish() did not run"
        assert run["name"] == ",".join(status["overrides"]) == ",".join(want["name"]), run["name"]
        assert run["group"] == group
        assert run["job_type"] == "train"
        assert f"loss:{want['loss']}" in run["tags"]
        assert run["config"]["seed"] == want["seed"]
        assert run["config"]["loss"] == config["loss"]  # the resolved config of this job, not another's
        assert run["config"]["overrides"] == status["overrides"]
        runs.append(run)
    assert len({r["id"] for r in runs}) == len(expected)
    return runs


def _expected_2x2(extra: tuple[str, ...] = ()) -> dict[str, dict]:
    out = {}
    for num, (loss, seed) in enumerate(itertools.product(["grpo", "sapo"], [0, 1])):
        name = [f"loss={loss}", f"seed={seed}", *extra]
        dirname = f"{num}_" + ",".join(sorted(name))  # Hydra sorts override_dirname
        out[dirname] = {"loss": loss, "seed": seed, "name": name}
    return out


def _report(cwd: Path, env: dict, sweep_dir: Path, variants: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "twinkle_exp.report", str(sweep_dir)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = sweep_dir / "report"
    md = (out / "report.md").read_text()
    assert (out / "report.html").stat().st_size > 0
    assert len(list(out.glob("*.png"))) >= 2
    n = len(_jobs(sweep_dir))
    assert f"{n} jobs: {n} finished" in md, md[:500]
    for variant in variants:
        assert f"| {variant} |" in md, f"{variant!r} not a row of:\n{md}"


@pytest.mark.slow
def test_2x2_multirun_names_groups_one_warm_start_and_report(tmp_path, cli_env, read_wandb_run):
    env = {**cli_env, "TWINKLE_CACHE": str(tmp_path / "cache")}  # a cache of its own: one warm-start, here
    _multirun(tmp_path, env, "loss=grpo,sapo", "seed=0,1", "debug=fast")
    sweep_dir = _sweep_dir(tmp_path)
    # multirun/<date>_<time>: the directory's name, also the wandb group, says when the sweep ran
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}", sweep_dir.name), sweep_dir
    expected = _expected_2x2(extra=("debug=fast",))
    assert sorted(expected) == [
        "0_debug=fast,loss=grpo,seed=0",
        "1_debug=fast,loss=grpo,seed=1",
        "2_debug=fast,loss=sapo,seed=0",
        "3_debug=fast,loss=sapo,seed=1",
    ]
    assert expected["0_debug=fast,loss=grpo,seed=0"]["name"] == ["loss=grpo", "seed=0", "debug=fast"]
    _check_jobs(sweep_dir, expected, sweep_dir.name, read_wandb_run)

    logs = [(job / "cli.log").read_text() for job in _jobs(sweep_dir).values()]
    assert sum("cache miss" in log for log in logs) == 1, "exactly one job trained the warm-start"
    assert sum("warm-start: reused" in log for log in logs) == 3
    assert "cache miss" in logs[0]  # the first job, then the others reuse it
    assert len(list((tmp_path / "cache").glob("warmup-*.pt"))) == 1

    # Rows name variants without the override they all share (debug=fast). One commit, machine and warm-start:
    # the report accepts the runs, and pairs each seed's runs (they share the seed's prompt and sampler streams).
    _report(tmp_path, env, sweep_dir, ["loss=grpo", "loss=sapo"])
    md = (sweep_dir / "report" / "report.md").read_text()
    assert "✓ every compared run records the same provenance" in md and "paired t, 2 vs 2 seeds" in md


@pytest.mark.slow
def test_2x2_multirun_with_joblib_keeps_jobs_apart(tmp_path, cli_env, read_wandb_run):
    _multirun(tmp_path, cli_env, "hydra/launcher=local_parallel", "loss=grpo,sapo", "seed=0,1", "debug=fast")
    sweep_dir = _sweep_dir(tmp_path)
    hydra_cfg = yaml.safe_load((sweep_dir / "multirun.yaml").read_text())["hydra"]
    assert hydra_cfg["launcher"]["_target_"].endswith("JoblibLauncher")
    assert hydra_cfg["launcher"]["n_jobs"] == 2
    _check_jobs(sweep_dir, _expected_2x2(extra=("debug=fast",)), sweep_dir.name, read_wandb_run)
    for job in _jobs(sweep_dir).values():  # each job's log tells its own loss only
        log = (job / "cli.log").read_text()
        other = "SAPOLoss(" if "loss=grpo" in job.name else "GRPOLoss("
        assert other not in log, f"{job.name} logged another job's loss"


@pytest.mark.slow
def test_sapo_tau_sweep_file_runs_with_a_smaller_grid(tmp_path, cli_env, read_wandb_run):
    # Command-line sweeps replace the file's hydra.sweeper.params key by key: 2 taus x 1 seed.
    _multirun(tmp_path, cli_env, "+sweep=sapo_tau", "debug=fast", "loss.tau=0.5,2.0", "seed=0")
    sweep_dir = _sweep_dir(tmp_path)
    assert sweep_dir.parent == tmp_path / "multirun" / "sapo_tau"
    assert TIMESTAMP.fullmatch(sweep_dir.name), sweep_dir
    jobs = _jobs(sweep_dir)
    assert sorted(jobs) == ["0_debug=fast,loss.tau=0.5,seed=0", "1_debug=fast,loss.tau=2.0,seed=0"]
    taus = {}
    for job in jobs.values():
        status = json.loads((job / "run.json").read_text())
        assert status["status"] == "finished" and status["loss"] == "sapo", status
        run = read_wandb_run(_wandb_log(job))
        assert run["group"] == "sapo_tau"
        assert run["name"] == ",".join(status["overrides"])
        assert "loss:sapo" in run["tags"]
        assert run["config"]["loss"]["_target_"] == "twinkle_exp.loss.SAPOLoss"
        assert run["config"]["sweep_name"] == "sapo_tau"
        taus[job.name] = run["config"]["loss"]["tau"]
        assert f"tau={taus[job.name]}" in (job / "cli.log").read_text()  # the instantiated loss
    assert sorted(taus.values()) == [0.5, 2.0]
    _report(tmp_path, cli_env, sweep_dir, [])


@pytest.mark.slow
def test_optuna_sweep_runs_two_trials_and_records_the_best(tmp_path, cli_env, read_wandb_run):
    _multirun(tmp_path, cli_env, "+sweep=optuna", "debug=fast", "hydra.sweeper.n_trials=2")
    sweep_dir = _sweep_dir(tmp_path)
    assert sweep_dir.parent.name == "optuna" and TIMESTAMP.fullmatch(sweep_dir.name)
    jobs = _jobs(sweep_dir)
    assert len(jobs) == 2
    accuracies = []
    for job in jobs.values():
        status = json.loads((job / "run.json").read_text())
        assert status["status"] == "finished", status
        accuracies.append(status["final"]["accuracy_after"])
        keys = {o.split("=", 1)[0] for o in status["overrides"]}
        assert {"optim.lr", "loss.clip_range", "loss.beta"} <= keys
        assert read_wandb_run(_wandb_log(job))["group"] == "optuna"
    results = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert results["name"] == "optuna"
    assert math.isclose(results["best_value"], max(accuracies))
    assert set(results["best_params"]) == {"optim.lr", "loss.clip_range", "loss.beta"}


REGIMES_SH = REPO / "sweeps" / "regimes.sh"


def _regime_table() -> dict[str, list[str]]:
    """sweeps/regimes.sh's `[name]="overrides"` table, as the script passes it to each verdict command."""
    rows = re.findall(r'^\s+\[(\w+)\]="([^"]*)"$', REGIMES_SH.read_text(), flags=re.M)
    return {name: overrides.split() for name, overrides in rows}


def test_regimes_script_table_has_the_six_regimes():
    assert set(_regime_table()) == {
        "staleness1",
        "staleness4",
        "minibatches16",
        "sampler_bf16",
        "sampler_bf16_tis",
        "long_completions",
    }


@pytest.mark.parametrize("regime", sorted(_regime_table()))
def test_each_regime_composes_with_every_six_losses_choice(regime):
    # The overrides are appended after a tuned verdict command's: they must compose and pass the checks
    # whatever loss and advantage that command chose.
    for loss in ("grpo", "gspo", "drgrpo", "cispo"):
        with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
            cfg = compose("config", overrides=[f"loss={loss}", "optim.lr=3e-4", *_regime_table()[regime]])
        check_config(cfg)


def test_long_completion_regime_gives_drgrpo_its_longer_normaliser():
    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        cfg = compose("config", overrides=["loss=drgrpo", *_regime_table()["long_completions"]])
    assert cfg.rollout.max_new_tokens == 96
    assert instantiate(cfg.loss).max_completion_length == 96


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({"SEEDS": "0,1;rm -rf x"}, ["staleness4"], "SEEDS must be a comma-separated list"),
        ({}, ["no_such_regime"], "unknown regime no_such_regime"),
    ],
)
def test_regimes_script_refuses_bad_input_before_running_anything(tmp_path, env, args, message):
    choices = tmp_path / "choices.yaml"
    choices.write_text("verdict_commands: []\n")
    proc = subprocess.run(
        ["bash", str(REGIMES_SH), str(choices), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
