"""A task and an advantage estimator of the user's own, in one module named by TWINKLE_EXP_PLUGINS, are one
file each: they train from the command line and appear in `--help` (as tests/test_user_loss.py for a loss)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from twinkle_exp.tasks import TASKS

MODULE = textwrap.dedent(
    '''
    """A user's plug-ins: a task (copy a string) and an estimator (twice the group-centred reward)."""

    import random
    from dataclasses import dataclass

    from twinkle_exp.loss.advantages import register
    from twinkle_exp.tasks import Example, ProceduralTask, register_task


    @register_task
    @dataclass(kw_only=True, eq=False)
    class EchoTask(ProceduralTask):
        """Copy a string of min_len..max_len letters from "abc": "echo:cab=" -> "cab"."""

        name = "echo"
        min_len: int = 2
        max_len: int = 4

        def num_prompts(self) -> int:
            return sum(3**k for k in range(self.min_len, self.max_len + 1))

        def random_example(self, rng: random.Random) -> Example:
            text = "".join(rng.choice("abc") for _ in range(rng.randint(self.min_len, self.max_len)))
            return Example(prompt=f"echo:{text}=", answer=text)


    @register("centered_twice", source="a test's own", group_baseline=True)
    def centered_twice(rewards, lengths, settings):
        """rewards, lengths [groups, G] float64 -> [groups, G]."""
        return 2 * (rewards - rewards.mean(dim=1, keepdim=True))
    '''
)


@pytest.fixture
def plugin_env(tmp_path, cli_env):
    (tmp_path / "my_plugins.py").write_text(MODULE)
    pythonpath = os.pathsep.join(p for p in (str(tmp_path), cli_env.get("PYTHONPATH", "")) if p)
    return dict(cli_env, TWINKLE_EXP_PLUGINS="my_plugins", PYTHONPATH=pythonpath)


def _run(args: list[str], cwd, env) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_a_user_task_and_estimator_train_from_the_cli(tmp_path, plugin_env):
    run_dir = tmp_path / "run"
    overrides = [
        "debug=fast",
        "task=echo",
        "advantage=centered_twice",
        "logger=csv",
        f"hydra.run.dir={run_dir}",
    ]
    _run([sys.executable, "-m", "twinkle_exp", *overrides], tmp_path, plugin_env)
    assert json.loads((run_dir / "run.json").read_text())["status"] == "finished"
    config = (run_dir / ".hydra" / "config.yaml").read_text()
    assert "_target_: my_plugins.EchoTask" in config and "estimator: centered_twice" in config
    assert len((run_dir / "metrics.csv").read_text().splitlines()) > 1


@pytest.mark.slow
def test_a_user_task_and_estimator_appear_in_help(tmp_path, plugin_env):
    shown = _run([sys.executable, "-m", "twinkle_exp", "--help"], tmp_path, plugin_env).stdout
    assert "echo" in shown and "centered_twice" in shown


def test_the_user_s_task_is_not_registered_in_this_session():
    # the subprocesses above register it; this session's registry holds the built-in tasks alone
    assert "echo" not in TASKS
