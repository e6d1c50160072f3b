"""Kill points by write (issue 48): a start on a finished run writes nothing of its record, and a SIGKILL at
each write it does make leaves the record byte for byte and the report's grouping unchanged.

The harness is tests/kill_points.py (strace). Its full enumeration of the four scenarios (a fresh run, a
resume, a re-run of a finished run, a refused start of another experiment on it) is a developer command:
`python tests/kill_points.py --work /tmp/kill-points` (docs/operations.md, A kill at any write). Here, in CI:
the two scenarios of the issue, every kill point of each, and the harness finding the issue's damage where
Hydra is let write `.hydra/` at start-up again.
"""

from __future__ import annotations

import pytest
from kill_points import (
    LOG,
    RECORD,
    SCENARIOS,
    Bench,
    exercise,
    parse_trace,
    prepare,
    strace_available,
    trace_scenario,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not strace_available(), reason="needs strace (apt-get install strace)"),
]


@pytest.fixture(scope="module")
def bench(tmp_path_factory, cli_env) -> Bench:
    return prepare(tmp_path_factory.mktemp("kill_points"), cli_env, resumable=False)


@pytest.fixture(scope="module")
def traces(bench):
    """`traces(scenario)`: the scenario's trace, taken once for the module's tests."""
    taken: dict = {}

    def get(scenario: str):
        if scenario not in taken:
            taken[scenario] = trace_scenario(bench, scenario)
        return taken[scenario]

    return get


def test_the_trace_names_the_files_and_calls_of_the_run_directory(tmp_path):
    """The parser on strace -f -y lines: threads, descriptors named by path, failed calls, reads."""
    run = tmp_path / "run"
    text = "\n".join(
        [
            f'100 openat(AT_FDCWD</x>, "{run}/run.tmp", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 3<{run}/run.tmp>',
            f'100 write(3<{run}/run.tmp>, "{{\\n  \\"status\\"", 14) = 14',
            f'100 openat(AT_FDCWD</x>, "{run}/run.json", O_RDONLY|O_CLOEXEC) = 4<{run}/run.json>',
            f'100 mkdir("{run}", 0777)     = -1 EEXIST (File exists)',
            f'100 rename("{run}/run.tmp", "{run}/run.json") = 0',
            f'101 write(5<{run}/metrics.csv>, "step\\n", 5 <unfinished ...>',
            '100 write(1<pipe:[7]>, "hello", 5) = 5',
            f"100 fsync(6<{run}>) = 0",
        ]
    )
    traced = parse_trace(text, run, 0)
    assert [e.label for e in traced.kill_points] == [
        "openat#1 run.tmp",
        "write#1 run.tmp",
        "rename#1 run.tmp -> run.json",
        "fsync#1 .",
    ]
    assert [e.ordinal for e in traced.events if e.call == "openat"] == [1, 2]  # reads count, as under -P
    assert traced.uncovered == ["write#1 metrics.csv"]  # another thread's write


@pytest.mark.parametrize("scenario", ["rerun", "refused"])
def test_a_start_on_a_finished_run_writes_nothing_of_its_record(traces, scenario):
    """The cause of issue 48: Hydra truncated `.hydra/*.yaml` at every start, and a refused start of another
    experiment left its own config there until its orderly refusal. Now neither start opens a file of the
    record for writing (so there is no truncation to kill at): only the log grows."""
    traced = traces(scenario)
    touched = {path for point in traced.kill_points for path in point.paths}
    assert touched <= {LOG, "."}, touched  # the log, and mkdir of the (existing) directory
    assert not set(RECORD) & touched
    assert traced.uncovered == []


@pytest.mark.parametrize("scenario", ["rerun", "refused"])
def test_a_kill_at_each_write_of_a_start_on_a_finished_run_changes_nothing(bench, traces, scenario):
    """Every kill point of a re-run of the finished run and of a refused start of `loss=sapo` on it: after
    the kill and a restart (the refused command, then the original), the record is byte for byte the
    finished run's (all three `.hydra/` files included), every file parses, and the report still labels it
    loss=grpo with no problem."""
    traced = traces(scenario)
    assert traced.kill_points, "no write to kill at: the log is appended to at every start"
    for point in traced.kill_points:
        outcome = exercise(bench, scenario, point, traced.paths)
        assert outcome.killed, f"{point.label}: the kill did not land ({outcome.landed})"
        assert (outcome.lost, outcome.unparsable, outcome.mislabelled) == ([], [], []), point.label


def test_the_scenarios_are_the_issue_s_four():
    assert SCENARIOS == ("fresh", "resume", "rerun", "refused")


def test_the_harness_finds_hydra_s_own_truncation_of_a_finished_run_s_record(bench):
    """The harness has teeth: with Hydra writing `.hydra/` at start-up again (`hydra.output_subdir=.hydra`,
    as before issue 48), a re-run of the finished run truncates config.yaml, and a kill before it is written
    again leaves it empty for good (the next start's "nothing to do" puts back what it found)."""
    hydra_writes = ["hydra.output_subdir=.hydra"]
    traced = trace_scenario(bench, "rerun", hydra_writes)
    # A kill lands on entry to a call, which then never runs: at the write after the truncating open, the
    # file is empty.
    [emptied] = [p for p in traced.kill_points if p.call == "write" and p.paths == (".hydra/config.yaml",)]
    outcome = exercise(bench, "rerun", emptied, traced.paths, hydra_writes)
    assert outcome.killed
    assert ".hydra/config.yaml: empty" in outcome.unparsable
    assert ".hydra/config.yaml changed" in outcome.lost
