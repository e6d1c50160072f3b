"""Kill points by write, not by time: a run's own writes into its directory, each one a SIGKILL in turn.

`trace_writes` runs a command once under strace (`-f -y`, so that every thread's writes are seen and every
descriptor is named by its path) and lists what it did to files under the run directory: opens for writing,
writes, truncations, renames, unlinks, fsyncs. `kill_at` runs the same command again and lets strace deliver
SIGKILL on entry to exactly one of those system calls: `-P <each path>` restricts both the tracing and the
injection counter to the run directory's files, and strace counts per system call and per thread, so "the
n-th `write` of the main thread to these paths" names one event of the traced run. The signal arrives before
the call runs (the kernel skips a call entered with a fatal signal pending); the next kill point covers the
state after it.

A kill point is a write-class event of the main thread (the one that writes every result file: checked in
`uncovered`, which lists writes by other threads and by relative path, which this scheme cannot target).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TRACED = (
    "openat,open,creat,write,pwrite64,writev,pwritev,ftruncate,truncate,rename,renameat,renameat2,"
    "fsync,fdatasync,unlink,unlinkat,mkdir,mkdirat"
)
WRITE_OPEN_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")
READ_ONLY_CALLS = ("openat", "open")  # an open is a kill point only when it opens for writing
_LINE = re.compile(r"^(?P<tid>\d+)\s+(?P<call>\w+)\((?P<args>.*)$")
_FD_PATH = re.compile(r"^-?\d+<(?P<path>[^>]*)>")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
KILLED = (137, -9)  # strace exits as its tracee did: killed by SIGKILL


def strace_available() -> bool:
    return shutil.which("strace") is not None


@dataclass(frozen=True)
class Event:
    """One system call of the traced run on a run-directory file: `call` (its name), the `ordinal`-th call of
    that name by thread `tid` on the run directory's paths, and the `paths` it touched (relative)."""

    tid: int
    call: str
    ordinal: int
    paths: tuple[str, ...]
    writes: bool  # changes a file (an open for reading is traced, and counted, but is no kill point)

    @property
    def label(self) -> str:
        return f"{self.call}#{self.ordinal} {' -> '.join(self.paths)}"


@dataclass
class Trace:
    main_tid: int
    events: list[Event]  # every call on the run directory's paths, in the order the trace lists them
    paths: list[str]  # absolute paths of every run-directory file the run touched (strace's -P set)
    relative: list[str]  # writes by a relative path (not matched by -P): not covered
    returncode: int

    @property
    def kill_points(self) -> list[Event]:
        return [e for e in self.events if e.writes and e.tid == self.main_tid]

    @property
    def uncovered(self) -> list[str]:
        """Writes no kill point targets: by another thread, or by a relative path."""
        return [e.label for e in self.events if e.writes and e.tid != self.main_tid] + self.relative


def _unescape(text: str) -> str:
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape")


PATH_CALLS = ("openat", "open", "creat", "truncate", "rename", "renameat", "renameat2", "unlink", "unlinkat")
PATH_CALLS += ("mkdir", "mkdirat")  # the calls that name files by path; the others name a descriptor


def _paths_of(call: str, args: str) -> tuple[list[str], list[str]]:
    """(absolute paths the call names, relative ones) from strace -y's rendering of its arguments."""
    if call not in PATH_CALLS:
        fd = _FD_PATH.match(args)
        return ([fd.group("path")] if fd else []), []  # write(3</path>, ...), fsync(5</dir>)
    found, relative = [], []
    for raw in _STRING.findall(args)[: 2 if call.startswith("rename") else 1]:
        text = _unescape(raw)
        (found if text.startswith("/") else relative).append(text)
    return found, relative


def _writes(call: str, args: str) -> bool:
    """Whether the call changed a file: an open for writing, or any other traced call that did not fail."""
    if re.search(r"\)\s+= -1 E", args):  # failed (mkdir of an existing folder: EEXIST): nothing changed
        return False
    if call in READ_ONLY_CALLS:
        return any(flag in args for flag in WRITE_OPEN_FLAGS)
    return True


def parse_trace(text: str, run_dir: Path, returncode: int) -> Trace:
    """The run-directory events of an `strace -f -y -o` file (`text`); the first thread is the main one."""
    root = str(Path(run_dir).absolute())
    inside = lambda path: path == root or path.startswith(root + "/")  # noqa: E731
    events: list[Event] = []
    paths: dict[str, None] = {}
    relative: list[str] = []
    counts: dict[tuple[int, str], int] = {}
    main_tid = None
    for line in text.splitlines():
        match = _LINE.match(line)
        if not match or "resumed>" in line:
            continue
        tid, call, args = int(match["tid"]), match["call"], match["args"]
        main_tid = main_tid if main_tid is not None else tid
        absolute, rel = _paths_of(call, args)
        mine = [p for p in absolute if inside(p)]
        relative += [f"{call} {p}" for p in rel if _writes(call, args)]
        if not mine:
            continue
        paths.update(dict.fromkeys(mine))
        counts[tid, call] = counts.get((tid, call), 0) + 1
        events.append(
            Event(
                tid,
                call,
                counts[tid, call],
                tuple(os.path.relpath(p, root) for p in mine),
                _writes(call, args),
            )
        )
    return Trace(main_tid or 0, events, list(paths), relative, returncode)


def trace_writes(argv: list[str], cwd: Path, env: dict, run_dir: Path, out: Path) -> Trace:
    """Run `argv` once under strace, every thread followed; its run-directory events."""
    proc = subprocess.run(
        ["strace", "-f", "-qq", "-y", "-e", "signal=none", f"--trace={TRACED}", "-o", str(out), *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return parse_trace(out.read_text(errors="replace"), run_dir, proc.returncode)


def kill_at(
    argv: list[str], cwd: Path, env: dict, point: Event, paths: list[str], out: Path
) -> tuple[int, str]:
    """Run `argv` with SIGKILL delivered on entry to `point` (main thread only); (exit status, the last
    traced call: the one killed, to check that the kill landed where it was aimed)."""
    where = [arg for path in paths for arg in ("-P", path)]
    inject = f"inject={point.call}:signal=KILL:when={point.ordinal}"
    proc = subprocess.run(
        ["strace", "-qq", "-y", "-e", "signal=none", f"--trace={point.call}", "-e", inject, *where]
        + ["-o", str(out), *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    lines = [
        line for line in out.read_text(errors="replace").splitlines() if line and not line.startswith("+++")
    ]
    return proc.returncode, lines[-1] if lines else ""


def python_argv(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "twinkle_exp", *args]


# --- The four scenarios, each on one run directory, and what a killed start must leave behind. ---

ARGS = [  # a tiny `debug=fast` run with a checkpoint at every step
    "debug=fast",
    "logger=csv",
    "trainer.save_checkpoint=true",
    "trainer.checkpoint_every=1",
    "trainer.max_steps=2",
]
OTHER = ["loss=sapo"]  # another experiment, refused on a finished run
SCENARIOS = ("fresh", "resume", "rerun", "refused")
RECORD = ("run.json", "metrics.csv", "samples.jsonl", ".hydra/config.yaml", ".hydra/hydra.yaml")
RECORD += (".hydra/overrides.yaml", "checkpoints/last.ckpt", "checkpoints/last.ckpt.sha256")
LOG = "cli.log"  # appended to by every start (Hydra's job log): only ever grows


def record_bytes(run: Path) -> dict[str, bytes | None]:
    """The run's record: every result file's bytes (None where absent)."""
    return {name: (run / name).read_bytes() if (run / name).is_file() else None for name in RECORD}


def copy_state(source: Path | None, run: Path) -> None:
    """Make `run` what `source` holds (absent when `source` is None)."""
    shutil.rmtree(run, ignore_errors=True)
    if source is not None:
        shutil.copytree(source, run, symlinks=True)


@dataclass
class Bench:
    """A scenario's fixed parts: the work folder, the run directory, the environment, the reference."""

    work: Path
    env: dict

    @property
    def run(self) -> Path:
        return self.work / "run"

    def argv(self, extra: list[str] = ()) -> list[str]:
        return python_argv([*ARGS, *extra, f"hydra.run.dir={self.run}"])

    def start(self, extra: list[str] = ()) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.argv(extra), cwd=self.work, env=self.env, capture_output=True, text=True, timeout=900
        )

    def state(self, name: str) -> Path:
        return self.work / "states" / name


def prepare(work: Path, env: dict, resumable: bool = True) -> Bench:
    """The reference run (uninterrupted, in the run directory itself) and the states each scenario starts
    from: `finished` (the reference) and, with `resumable`, `resumable` (killed at the second checkpoint's
    rename: step 1's checkpoint kept, run.json saying "running")."""
    bench = Bench(Path(work).absolute(), env)
    bench.work.mkdir(parents=True, exist_ok=True)
    copy_state(None, bench.run)
    done = bench.start()
    assert done.returncode == 0, done.stderr[-3000:]
    copy_state(bench.run, bench.state("finished"))
    copy_state(None, bench.run)
    if not resumable:
        return bench
    traced = trace_writes(bench.argv(), bench.work, env, bench.run, bench.work / "fresh.trace")
    renames = [
        e for e in traced.kill_points if e.call == "rename" and e.paths[0] == "checkpoints/last.ckpt.tmp"
    ]
    second = renames[1]  # the step-2 checkpoint's: step 1's is kept, run.json still says "running"
    copy_state(None, bench.run)
    code, _ = kill_at(bench.argv(), bench.work, env, second, traced.paths, bench.work / "kill.trace")
    assert code in KILLED, code
    copy_state(bench.run, bench.state("resumable"))
    return bench


def scenario_start(bench: Bench, scenario: str) -> tuple[Path | None, list[str]]:
    """(the state the scenario starts from, the extra overrides of its command)."""
    return {
        "fresh": (None, []),
        "resume": (bench.state("resumable"), []),
        "rerun": (bench.state("finished"), []),
        "refused": (bench.state("finished"), OTHER),
    }[scenario]


def trace_scenario(bench: Bench, scenario: str, more: list[str] = ()) -> Trace:
    """The scenario's command traced from its starting state (`more`: overrides added to it)."""
    source, extra = scenario_start(bench, scenario)
    extra = [*extra, *more]
    copy_state(source, bench.run)
    traced = trace_writes(
        bench.argv(extra), bench.work, bench.env, bench.run, bench.work / f"{scenario}.trace"
    )
    expected = 2 if scenario == "refused" else 0
    assert traced.returncode == expected, f"{scenario}: exit {traced.returncode} under strace"
    return traced


@dataclass
class Outcome:
    point: str
    killed: bool
    landed: str  # the call the kill landed on, as strace printed it
    lost: list[str]  # result figures or files that differ from what an uninterrupted run left
    unparsable: list[str]
    mislabelled: list[str]  # a record that describes an experiment that did not run there


def check_run(bench: Bench, scenario: str, before: dict[str, bytes | None], log_before: bytes) -> Outcome:
    """What the run directory holds after a killed start and its restart, against the uninterrupted run."""
    from fault_injection import damaged_files

    from twinkle_exp.report.loading.runs import load_run
    from twinkle_exp.tracking.hydra_record import record_differences
    from twinkle_exp.tracking.samples_file import read_samples

    run, finished = bench.run, bench.state("finished")
    unparsable = damaged_files(run, bench.work / "no-cache")
    unparsable += [
        f"{p}: empty"
        for p in (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml")
        if (run / p).is_file() and not (run / p).read_bytes().strip()
    ]
    unparsable += read_samples(run / "samples.jsonl")[1]
    lost: list[str] = []
    mislabelled: list[str] = []
    now = record_bytes(run)
    if scenario in ("rerun", "refused"):  # the finished run's record, byte for byte
        lost += [f"{name} changed" for name in RECORD if now[name] != before[name]]
        log_now = (run / LOG).read_bytes() if (run / LOG).is_file() else b""
        if not log_now.startswith(log_before):
            lost.append(f"{LOG}: its earlier lines changed")
    else:
        from cli_run_helpers import metric_rows

        if metric_rows(run) != metric_rows(finished):
            lost.append("metrics.csv rows differ from the uninterrupted run's")
        final = json.loads(now["run.json"] or b"{}").get("final") or {}
        reference = json.loads((finished / "run.json").read_text()).get("final") or {}
        if final.get("accuracy_after") != reference.get("accuracy_after"):
            lost.append(f"final accuracy {final.get('accuracy_after')} != {reference.get('accuracy_after')}")
        for name in (".hydra/config.yaml", ".hydra/overrides.yaml"):
            if now[name] != (finished / name).read_bytes():
                mislabelled.append(f"{name} is not the command's")
    info = json.loads(now["run.json"] or b"{}")
    if info.get("status") != "finished":
        lost.append(f"run.json says {info.get('status')!r}")
    identity = info.get("identity")
    if not isinstance(identity, dict):
        mislabelled.append("run.json has no identity")
    else:
        mislabelled += record_differences(run, identity)
    loaded = load_run(run, bench.work)
    if loaded.choices.get("loss") != "grpo" or identity and identity.get("choices", {}).get("loss") != "grpo":
        mislabelled.append(f"labelled loss={loaded.choices.get('loss')}")
    return Outcome("", True, "", lost, unparsable, mislabelled)


def exercise(bench: Bench, scenario: str, point: Event, paths: list[str], more: list[str] = ()) -> Outcome:
    """Kill the scenario's command at `point`, restart, and check what is left (`more`: overrides added to
    every command)."""
    source, extra = scenario_start(bench, scenario)
    extra = [*extra, *more]
    copy_state(source, bench.run)
    before = record_bytes(bench.run)
    log_before = (bench.run / LOG).read_bytes() if (bench.run / LOG).is_file() else b""
    code, landed = kill_at(bench.argv(extra), bench.work, bench.env, point, paths, bench.work / "kill.trace")
    restarts = [extra, list(more)] if scenario == "refused" else [extra]  # the refused one, the original
    problems = []
    for again in restarts:
        done = bench.start(again)
        wanted = 2 if OTHER[0] in again else 0
        if done.returncode != wanted:
            problems.append(
                f"restart {' '.join(again) or 'original'}: exit {done.returncode}: {done.stderr[-300:]}"
            )
    outcome = check_run(bench, scenario, before, log_before)
    # Killed, and on the call aimed at: strace's last line is that call, on that call's first path.
    on_target = landed.startswith(point.call + "(") and f"{point.paths[0]}" in landed.replace(
        str(bench.run) + "/", ""
    )
    outcome.point, outcome.killed, outcome.landed = point.label, code in KILLED and on_target, landed
    outcome.lost = problems + outcome.lost
    return outcome


def spread(points: list[Event]) -> list[Event]:
    """`points` in an order whose every prefix covers the run evenly: every 8th, then the 4th ones between,
    then the 2nd ones, then the rest (so a run stopped early has still tried all of its phases)."""
    order: list[int] = []
    for step in (8, 4, 2, 1):
        order += [i for i in range(0, len(points), step) if i not in order]
    return [points[i] for i in order]


def enumerate_points(
    bench: Bench, scenario: str, every: int = 1, only: int | None = None
) -> tuple[Trace, list[Outcome]]:
    """Exercise every `every`-th kill point of `scenario` (`only`: the first that many of those, in the
    `spread` order); prints a line per kill point as it goes."""
    traced = trace_scenario(bench, scenario)
    points = spread(traced.kill_points[::every])[:only]
    print(f"{scenario}: {len(traced.kill_points)} kill points, exercising {len(points)}", flush=True)
    outcomes = []
    for point in points:
        outcome = exercise(bench, scenario, point, traced.paths)
        bad = outcome.lost + outcome.unparsable + outcome.mislabelled
        print(
            f"{scenario} {outcome.point}: {'killed' if outcome.killed else 'NOT KILLED: ' + outcome.landed}"
            f"{': ' + '; '.join(bad) if bad else ''}",
            flush=True,
        )
        outcomes.append(outcome)
    return traced, outcomes


def main() -> None:
    import argparse
    import time

    parser = argparse.ArgumentParser(description="SIGKILL a tiny run at each of its writes; restart; check.")
    parser.add_argument("--work", type=Path, required=True, help="a scratch folder (its run/ is replaced)")
    parser.add_argument("--scenario", choices=SCENARIOS, action="append", help="default: all four")
    parser.add_argument("--every", type=int, default=1, help="every n-th kill point only")
    parser.add_argument("--only", type=int, default=None, help="at most this many kill points a scenario")
    args = parser.parse_args()
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    began = time.monotonic()
    scenarios = args.scenario or list(SCENARIOS)
    bench = prepare(args.work, env, resumable="resume" in scenarios)
    print(f"prepared in {time.monotonic() - began:.0f} s", flush=True)
    totals = []
    for scenario in scenarios:
        start = time.monotonic()
        traced, outcomes = enumerate_points(bench, scenario, args.every, args.only)
        row = (
            scenario,
            len(traced.kill_points),
            len(outcomes),
            sum(o.killed for o in outcomes),
            sum(bool(o.lost) for o in outcomes),
            sum(bool(o.unparsable) for o in outcomes),
            sum(bool(o.mislabelled) for o in outcomes),
            len(traced.uncovered),
            time.monotonic() - start,
        )
        totals.append(row)
        print(
            "| scenario | kill points | exercised | killed | lost | unparsable | mislabelled | uncovered | s |"
        )
        for r in totals:
            print(
                "| " + " | ".join(f"{v:.0f}" if isinstance(v, float) else str(v) for v in r) + " |",
                flush=True,
            )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
