"""The step benchmark's worker runs the checkout it is pointed at, not the installed one."""

import subprocess
import sys
from pathlib import Path

from benchmarks import step


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


def test_the_reward_separates_a_random_policys_samples():
    # The benchmark's updates need gradients: a group whose rewards all tie has zero advantages.
    assert step.digit_share([], ["12ab", "xyz", "", "9"], []) == [0.5, 0.0, 0.0, 1.0]


def test_the_fingerprint_tells_weights_apart_bit_for_bit():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    before = step.weights_fingerprint(model)
    assert step.weights_fingerprint(model) == before
    with torch.no_grad():
        model.weight[0, 0] = torch.nextafter(model.weight[0, 0], torch.tensor(1.0))
    assert step.weights_fingerprint(model) != before


def test_an_unknown_variant_is_refused_by_name():
    cmd = [sys.executable, step.__file__, "--variants", "default,turbo"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--variants: turbo; choose from default,fused_adamw,compile" in proc.stderr
