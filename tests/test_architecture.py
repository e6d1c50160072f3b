"""Imports run one way, from the entry down to the libraries (docs/architecture.md), never up or sideways."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "twinkle_exp"

# A unit may import only units of a lower rank; units of the same rank know nothing of each other.
RANKS = {
    "errors": 0,
    "loss": 1,
    "models": 1,
    "tasks": 1,
    "verifier": 1,
    "parallel": 1,
    "metric_names": 2,
    "rewards": 3,
    "sampling": 3,
    "policy": 3,
    "config": 4,
    "tracking": 5,
    "lifecycle": 6,
    "report": 6,
    "training": 7,
    "run": 8,
    "benchmarks": 8,
    "cli": 9,
    "__main__": 10,
    "__init__": 10,
}


def _unit(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> set[str]:
    """The twinkle_exp modules `path` imports at run time (imports under `if TYPE_CHECKING:` excluded)."""
    tree = ast.parse(path.read_text())
    guarded = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for n in ast.walk(node)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "twinkle_exp":
            if node.module == "twinkle_exp":
                found |= {f"twinkle_exp.{a.name}" for a in node.names}
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "twinkle_exp"}
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def test_every_unit_has_a_rank():
    assert {_unit(p) for p in MODULES} <= set(RANKS), {_unit(p) for p in MODULES} - set(RANKS)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_run_down(path):
    unit = _unit(path)
    imported = {m for m in _imports(path) if m != "twinkle_exp"}  # the (empty) package root
    if unit == "benchmarks":  # `--against` workers also import another checkout's (older) module names
        imported = {m for m in imported if m.split(".")[1] in RANKS}
    upward = [m for m in imported if m.split(".")[1] != unit and RANKS[m.split(".")[1]] >= RANKS[unit]]
    assert not upward, f"{unit} (rank {RANKS[unit]}) imports {upward}"


def test_the_report_reads_runs_through_the_run_directory_contract_alone():
    allowed = {"twinkle_exp.tracking.run_json", "twinkle_exp.metric_names"}
    for path in (PACKAGE / "report").rglob("*.py"):
        outside = {m for m in _imports(path) if not m.startswith("twinkle_exp.report")}
        assert outside <= allowed, f"{path.name} imports {outside - allowed}"


def test_the_loss_library_imports_nothing_else_of_twinkle_exp():
    for path in (PACKAGE / "loss").rglob("*.py"):
        assert all(m.startswith("twinkle_exp.loss") for m in _imports(path)), path.name


def test_the_checker_sees_an_upward_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "from twinkle_exp.training.module import PolicyModule\nif TYPE_CHECKING:\n    import twinkle_exp.run\n"
    )
    assert _imports(module) == {"twinkle_exp.training.module"}
