"""A loss of the user's own, in a module of theirs named by TWINKLE_EXP_LOSSES, is one file: it trains from the
command line, appears in `--help` and in the zoo sweep, and its option's defaults are its class's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

MODULE = textwrap.dedent(
    '''
    """A user's loss: a scaled REINFORCE, -scale A logp, token mean."""

    from twinkle_exp.loss import PolicyGradientLoss, param, register_loss
    from twinkle_exp.loss.params import positive

    SCALED_WEIGHT = "scaled/weight_mean"


    @register_loss
    class ScaledReinforceLoss(PolicyGradientLoss):
        name = "scaled_reinforce"
        aggregation = "token_mean"
        metric_keys = (SCALED_WEIGHT,)
        clip_sides = ()

        scale: float = param(0.5, positive)

        def per_token(self, spec, b, ratio):
            weight = self.scale * b.mask
            return -weight * b.advantages * b.logps, {SCALED_WEIGHT: weight}
    '''
)

# In a subprocess, so the registry of this test session stays the built-in one.
PROBE = textwrap.dedent(
    """
    import dataclasses, json
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf
    from twinkle_exp.config.schema import LOSS_EXPERIMENT_DEFAULTS
    from twinkle_exp.config.store import register_configs
    from twinkle_exp.loss import LOSSES

    register_configs()
    cls = LOSSES["scaled_reinforce"]
    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        loss = OmegaConf.to_container(compose("config", overrides=["loss=scaled_reinforce"]).loss)
        zoo = compose("config", overrides=["+sweep=zoo"], return_hydra_config=True).hydra.sweeper.params.loss
    want = {f.name: LOSS_EXPERIMENT_DEFAULTS.get(f.name, f.default) for f in dataclasses.fields(cls)}
    print(json.dumps({"loss": loss, "want": want, "zoo": zoo.split(",")}))
    """
)


@pytest.fixture
def user_env(tmp_path, cli_env):
    (tmp_path / "my_losses.py").write_text(MODULE)
    pythonpath = os.pathsep.join(p for p in (str(tmp_path), cli_env.get("PYTHONPATH", "")) if p)
    return dict(cli_env, TWINKLE_EXP_LOSSES="my_losses", PYTHONPATH=pythonpath)


def _run(args: list[str], cwd, env, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_a_user_loss_trains_from_the_cli(tmp_path, user_env):
    run_dir = tmp_path / "run"
    overrides = ["debug=fast", "loss=scaled_reinforce", "logger=csv", f"hydra.run.dir={run_dir}"]
    _run([sys.executable, "-m", "twinkle_exp", *overrides], tmp_path, user_env)
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "train/scaled/weight_mean" in header, header
    assert json.loads((run_dir / "run.json").read_text())["status"] == "finished"


def test_a_user_loss_is_in_help_the_zoo_and_has_its_class_s_defaults(tmp_path, user_env):
    help_lines = _run([sys.executable, "-m", "twinkle_exp", "--help"], tmp_path, user_env).stdout.splitlines()
    [losses] = [line for line in help_lines if line.startswith("loss: ")]
    assert "scaled_reinforce" in losses.removeprefix("loss: ").split(", ")

    probe = json.loads(_run([sys.executable, "-c", PROBE], tmp_path, user_env).stdout.splitlines()[-1])
    assert probe["loss"].pop("_target_") == "my_losses.ScaledReinforceLoss"
    assert probe["loss"] == probe["want"] and probe["want"]["scale"] == 0.5
    assert "scaled_reinforce" in probe["zoo"] and "grpo" in probe["zoo"]


def test_an_unimportable_loss_module_is_named(tmp_path, cli_env):
    env = dict(cli_env, TWINKLE_EXP_LOSSES="no_such_losses_module")
    proc = subprocess.run(
        [sys.executable, "-m", "twinkle_exp", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "TWINKLE_EXP_LOSSES: cannot import plug-in module 'no_such_losses_module'" in proc.stderr
