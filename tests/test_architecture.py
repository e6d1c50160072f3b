"""Imports run one way, from the entry down to the libraries (docs/architecture.md), never up or sideways,
and no module imports itself back through others. Every import counts: at run time, inside a function, or
for type hints only (`if TYPE_CHECKING:`): a hint that needs an upward import means the type lives in the
wrong package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "twinkle_exp"

# A unit may import only units of a lower rank; units of the same rank know nothing of each other.
RANKS = {
    "errors": 0,
    "plugins": 0,
    "logprobs": 0,
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
    "summary": 6,
    "training": 7,
    "report": 7,
    "run": 8,
    "cli": 9,
    "__main__": 10,
    "__init__": 10,
}


def _unit(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _module(path: Path) -> str:
    """`twinkle_exp.report.loading.runs` for report/loading/runs.py; a package's name for its __init__."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    """Whether `name` is a module or package of twinkle_exp in this checkout."""
    where = PACKAGE.parent.joinpath(*name.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def _imports(path: Path, source: str | None = None) -> set[str]:
    """The twinkle_exp modules `path` (or `source`, as if it stood at `path`) imports, wherever the import
    stands (`if TYPE_CHECKING:` included).

    `from a.b import c` imports the module `a.b.c` when there is one, else (a name defined in it) `a.b`;
    relative imports are resolved against the module's package.
    """
    tree = ast.parse(path.read_text() if source is None else source)
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            if base.split(".")[0] != "twinkle_exp":
                continue
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base)
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
    upward = [m for m in imported if m.split(".")[1] != unit and RANKS[m.split(".")[1]] >= RANKS[unit]]
    assert not upward, f"{unit} (rank {RANKS[unit]}) imports {upward}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan), each sorted, and self-imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1 or node in graph.get(node, ()):
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def _module_graph() -> dict[str, set[str]]:
    return {_module(p): {m for m in _imports(p) if m != "twinkle_exp"} for p in MODULES}


def test_no_module_imports_itself_back_through_others():
    cycles = _cycles(_module_graph())
    assert not cycles, "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_report_reads_runs_through_the_run_directory_contract_alone():
    # run_json: run.json; metrics_csv: metrics.csv's reader; samples_file: samples.jsonl (torch-free), and
    # the run's own end-of-run figures and checks (summary/, torch-free), which the report builds on;
    # hydra_record: `.hydra/`, checked against run.json's identity of it (torch-free)
    allowed = {
        "twinkle_exp.tracking.run_json",
        "twinkle_exp.tracking.metrics_csv",
        "twinkle_exp.tracking.samples_file",
        "twinkle_exp.tracking.items_file",  # items.jsonl: per held-out prompt results, torch-free like samples
        "twinkle_exp.tracking.hydra_record",
        "twinkle_exp.metric_names",
    }
    for path in (PACKAGE / "report").rglob("*.py"):
        outside = {
            m for m in _imports(path) if not m.startswith(("twinkle_exp.report", "twinkle_exp.summary"))
        }
        assert outside <= allowed, f"{path.name} imports {outside - allowed}"


def _third_party_imports(path: Path) -> set[str]:
    """The top-level names of every package `path` imports, wherever the import stands."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


TRAINER = [p for p in MODULES if _unit(p) != "report"]


@pytest.mark.parametrize("path", TRAINER, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_trainer_imports_neither_the_analysis_nor_its_dependencies(path):
    """Three homes by audience (docs/architecture.md): a run, a refusal, --help and the end-of-run summary
    need neither the report nor the [report] extra's scipy and matplotlib."""
    assert not {m for m in _imports(path) if m.startswith("twinkle_exp.report")}, path
    assert not _third_party_imports(path) & {"scipy", "matplotlib"}, path


def test_developer_tools_live_outside_the_installed_package():
    """Benchmarks and diagnose commands are the repository's (benchmarks/, diagnose/), never installed."""
    assert not (PACKAGE / "benchmarks").exists() and not (PACKAGE / "diagnose").exists()
    assert (PACKAGE.parent / "benchmarks" / "harness.py").is_file()


# Inside report/, the same rule: what loads runs knows nothing of what summarizes, diagnoses or renders them.
REPORT_RANKS = {
    "loading": 0,
    "statistics": 1,
    "diagnostics": 2,
    "rendering": 3,
    "findings": 4,
    "pipeline": 5,
    "run_summary": 5,
    "scaling": 6,
    "tuning": 6,
    "regimes": 6,
    "suite": 6,
    "__main__": 6,
    "__init__": 6,
}


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "report").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_the_report_s_parts_import_only_run_down(path):
    part = _unit_in(path, PACKAGE / "report")
    inside = {m.split(".")[2] for m in _imports(path) if m.startswith("twinkle_exp.report.")}
    upward = [m for m in inside if m != part and REPORT_RANKS[m] >= REPORT_RANKS[part]]
    assert not upward, f"report/{part} imports report/{upward}"


def _unit_in(path: Path, package: Path) -> str:
    rel = path.relative_to(package)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


@pytest.mark.slow
def test_the_report_imports_neither_torch_nor_lightning():
    """The report reaches the loss's metric keys through metric_names; loss/__init__ loads names lazily."""
    code = "import sys, twinkle_exp.report.__main__; print(sorted({'torch', 'lightning'} & set(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", proc.stdout


def test_the_loss_library_imports_nothing_else_of_twinkle_exp_but_the_log_prob_kernels():
    # and the plug-in loader every registry shares (standard library only)
    for path in (PACKAGE / "loss").rglob("*.py"):
        allowed = ("twinkle_exp.loss", "twinkle_exp.logprobs", "twinkle_exp.plugins")
        assert all(m.startswith(allowed) for m in _imports(path)), path.name


def test_the_plug_in_loader_imports_nothing_but_the_standard_library():
    names = _third_party_imports(PACKAGE / "plugins.py")
    assert names <= {"__future__", "importlib", "os", "pkgutil"}, names


def test_the_checker_sees_every_kind_of_import():
    source = (
        "from twinkle_exp.training.module import PolicyModule\n"
        "from twinkle_exp.loss import metric_keys, LOSSES\n"
        "from . import store\n"
        "def f():\n    import twinkle_exp.run\n"
        "if TYPE_CHECKING:\n    from twinkle_exp.config.schema import Config\n"
    )
    assert _imports(PACKAGE / "config" / "m.py", source) == {
        "twinkle_exp.training.module",
        "twinkle_exp.loss.metric_keys",
        "twinkle_exp.loss",
        "twinkle_exp.config.store",
        "twinkle_exp.run",
        "twinkle_exp.config.schema",
    }


def test_the_cycle_finder_sees_a_circle_and_a_self_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _cycles(graph) == [["a", "b", "c"], ["e"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
