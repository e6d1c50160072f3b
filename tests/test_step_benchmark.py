"""The step benchmark's worker runs the checkout it is pointed at, not the installed one."""

import subprocess
import sys
from pathlib import Path

from twinkle_exp.benchmarks import step


def _worker(tree: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, step.__file__, "--worker", "tiny", "--out", "unused", "--tree", str(tree)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_a_tree_without_the_package_is_refused_by_name(tmp_path):
    # Before, such a tree fell through to the installed package: this checkout, compared with itself.
    proc = _worker(tmp_path)
    assert proc.returncode != 0
    assert f"--against {tmp_path}: twinkle_exp was imported from" in proc.stderr


def test_the_worker_imports_the_other_trees_package(tmp_path):
    package = tmp_path / "twinkle_exp"
    package.mkdir()
    # A package that says where it was loaded from, then stops the worker before any training.
    (package / "__init__.py").write_text("raise SystemExit('loaded from ' + __file__)\n")
    proc = _worker(tmp_path)
    assert f"loaded from {package / '__init__.py'}" in proc.stderr
