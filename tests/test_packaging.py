"""A non-editable install (a built wheel) carries the config tree and runs from any directory."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_ships_conf_and_runs_outside_the_repo(tmp_path, cli_env):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("twinkle_exp-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for conf_file in ROOT.glob("conf/**/*.yaml"):
        assert f"twinkle_exp/conf/{conf_file.relative_to(ROOT / 'conf')}" in names, conf_file
    for module in ROOT.glob("twinkle_exp/**/*.py"):
        assert str(module.relative_to(ROOT)) in names, module
    for protocol in ROOT.glob("twinkle_exp/report/protocols/*.yaml"):  # tuning protocols run from the wheel
        assert str(protocol.relative_to(ROOT)) in names, protocol
    assert not [n for n in names if n.startswith(("benchmarks/", "diagnose/"))]  # developer tools stay out

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    # PYTHONPATH puts the installed copy ahead of the editable install: check it is the one imported.
    env = dict(cli_env, PYTHONPATH=str(site))
    code = "import twinkle_exp, sys; print(twinkle_exp.__file__)"
    where = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True)
    assert where.stdout.strip().startswith(str(site)), where.stdout + where.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "twinkle_exp", "debug=fast", "logger=csv"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (status,) = work.glob("outputs/*/*/run.json")
    assert json.loads(status.read_text())["status"] == "finished"


def test_pyproject_lists_every_package():
    """pyproject.toml names its packages (the conf tree maps from another folder, which `find` cannot do):
    a new package left out of the list would be missing from the wheel."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "twinkle_exp").rglob("__init__.py")}
    assert found | {"twinkle_exp.conf"} == listed
