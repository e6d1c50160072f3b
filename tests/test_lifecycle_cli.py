"""Through the CLI: every refused start on a finished run's directory is one line, exit 2, no traceback, and
leaves every file of the directory byte for byte as it was (Hydra's included); a signal during the
warm-start stops it within a step, ends the run "interrupted" and caches nothing."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_run_helpers import check_ok, run_twinkle
from test_lifecycle_faults import _tree

from twinkle_exp.models.cache_files import digest_file, sha256_of

FAST = ["debug=fast", "logger=csv", "trainer.save_checkpoint=true", "trainer.max_steps=4"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory, cli_env) -> tuple[Path, Path]:
    """A finished 4-step run and the warm-start cache it was built from."""
    root = tmp_path_factory.mktemp("finished")
    env = {**cli_env, "TWINKLE_CACHE": str(root / "cache")}
    check_ok(run_twinkle([*FAST, f"hydra.run.dir={root / 'run'}"], root, env))
    return root / "run", root / "cache"


def _truncate_checkpoint(run: Path, cache: Path) -> None:
    ckpt = run / "checkpoints" / "last.ckpt"
    ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])


def _replace_cache(run: Path, cache: Path) -> None:
    [path] = cache.glob("warmup-*.pt")
    state = torch.load(path, weights_only=True)
    # Same keys and shapes, so it is loaded, but another reference (every tensor: tied ones share storage).
    state = {k: v + 1e-3 if v.is_floating_point() else v for k, v in state.items()}
    torch.save(state, path)
    # With its own digest, as a cache retrained elsewhere would have: not a damaged file, another reference.
    digest_file(path).write_text(f"{sha256_of(path)}  {path.name}\n")


CASES = {
    "another loss": (
        ["loss=sapo", "trainer.max_steps=8"],
        None,
        "belongs to another experiment (loss._target_",
    ),
    "another seed, same steps": (["seed=1"], None, "belongs to another experiment (seed: 0 there, 1 here)"),
    "resume=null": (["resume=null"], None, "resume=null, but"),
    "another process count": (
        ["trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp", "trainer.max_steps=8"],
        None,
        "was written by 1 process(es) and this run has 2",
    ),
    "truncated checkpoint": (["trainer.max_steps=8"], _truncate_checkpoint, "does not match its digest"),
    "replaced warm-start cache": (
        ["trainer.max_steps=8", "logger=wandb"],  # refused after the warm-start, with wandb started
        _replace_cache,
        "the frozen reference built now differs",
    ),
    "a bad setting": (["trainer.max_steps=-1"], None, "trainer.max_steps"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_start_is_one_line_and_changes_no_file(case, finished, tmp_path, cli_env):
    overrides, damage, said = CASES[case]
    run, cache = tmp_path / "run", tmp_path / "cache"
    shutil.copytree(finished[0], run, symlinks=True)
    shutil.copytree(finished[1], cache)
    if damage is not None:
        damage(run, cache)
    before = _tree(run)
    env = {**cli_env, "TWINKLE_CACHE": str(cache)}
    proc = run_twinkle([*FAST, *overrides, f"hydra.run.dir={run}"], tmp_path, env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and said in proc.stderr
    assert _tree(run) == before, "the refused start changed the run directory"
    assert json.loads((run / "run.json").read_text())["status"] == "finished"


def _wait_for_line(path: Path, text: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in {path} within {timeout} s")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_warm_start_within_a_step_and_caches_nothing(signum, tmp_path, cli_env):
    run, cache = tmp_path / "run", tmp_path / "cache"
    env = {**cli_env, "TWINKLE_CACHE": str(cache)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "twinkle_exp", *FAST, "warmup.steps=100000", f"hydra.run.dir={run}"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for_line(run / "cli.log", "100000 supervised steps (cache miss", proc)
    time.sleep(1.0)  # some steps in
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)  # 100000 steps would take hours
    assert proc.returncode == 128 + signum, err[-3000:]
    assert f"interrupted by {signal.Signals(signum).name} at optimizer step 0" in err
    assert "warm-start stopped after" in (run / "cli.log").read_text() and "Traceback" not in err
    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "interrupted" and status["checkpoint"] is None
    assert not list(cache.glob("warmup-*.pt")), "a part of a warm-start was cached"
    assert not list(cache.glob("*.tmp"))
