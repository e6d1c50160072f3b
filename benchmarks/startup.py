"""Seconds from the command to the one-line refusal of a bad setting.

    python -m benchmarks.startup [--repeats 5] [--against PYTHON] [-- OVERRIDES...]
    python -m benchmarks.startup --expect 0 -- --help        # the help text instead of a refusal

Runs `python -m twinkle_exp optim.lr=-1` (or the overrides given after `--`) in an empty directory, each
repeat its own process, and prints the median wall time and the machine's load average before and after.
The refusal must come before Lightning and transformers are imported (the config check imports neither), so
this is the interpreter, torch, Hydra and the check. `--against PYTHON` times the same command with another
interpreter whose `twinkle_exp` is another checkout (e.g. a venv with `pip install -e <old checkout>`),
alternating the two repeat by repeat, so both see the same machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import load_average, median

DEFAULT_OVERRIDES = ["optim.lr=-1"]
USAGE_ERROR = 2


def _time_command(python: str, overrides: list[str], cwd: str, expect: int) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([python, "-m", "twinkle_exp", *overrides], cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != expect:
        raise SystemExit(f"{python}: expected exit {expect}, got {proc.returncode}:\n{proc.stderr}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--against", default=None, help="another interpreter, timed side by side")
    parser.add_argument("--expect", type=int, default=USAGE_ERROR, help="the exit status (0 for --help)")
    parser.add_argument("overrides", nargs="*", default=DEFAULT_OVERRIDES)
    args = parser.parse_args()
    pythons = [("this checkout", sys.executable)] + ([("against", args.against)] if args.against else [])
    print(f"python -m twinkle_exp {' '.join(args.overrides)}; {args.repeats} repeats; {load_average()}")
    times: dict[str, list[float]] = {label: [] for label, _ in pythons}
    with tempfile.TemporaryDirectory() as cwd:
        for _ in range(args.repeats):
            for label, python in pythons:
                times[label].append(_time_command(python, args.overrides, cwd, args.expect))
    for label, python in pythons:
        runs = " ".join(f"{t:.2f}" for t in times[label])
        print(f"{label:<14} median {median(times[label]):6.2f} s  (runs: {runs})  {python}")
    print(load_average())


if __name__ == "__main__":
    main()
