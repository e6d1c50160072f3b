"""The behaviour fixtures of tests/test_behaviour_fixtures.py: reading, comparing and (run as a script)
re-recording them on this machine."""

from __future__ import annotations

import csv
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

from twinkle_exp.loss.registry import losses

FIXTURES = Path(__file__).parent / "fixtures" / "behaviour"
LOSSES = sorted(losses())  # the built-in ones (TWINKLE_EXP_PLUGINS unset in the tests)


def fast_overrides(loss: str) -> list[str]:
    """The `debug=fast` run of `loss`: a loss that reads each call's groups (GVPO) gets minibatches of whole
    groups, which it needs; every other loss runs as the option alone."""
    whole_groups = ["optim.minibatch_split=groups"] if losses()[loss].whole_groups else []
    return ["debug=fast", f"loss={loss}", *whole_groups]


def machine() -> dict:
    """The CPU model, its vector-instruction flags and torch's version: what the floats depend on."""
    import torch

    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"model name\s*:\s*(.*)", info)
    flags = re.search(r"flags\s*:\s*(.*)", info)
    isa = sorted(
        f for f in (flags.group(1).split() if flags else []) if f.startswith(("avx", "fma", "amx", "sse4"))
    )
    return {
        "cpu": model.group(1).strip() if model else platform.processor(),
        "isa": isa,
        "torch": torch.__version__,
    }


# Extra flags that change which kernels run (oneDNN's bf16 / fp16 / AMX paths); other extra flags here
# (avx_vnni, avx512_vp2intersect: seen on a machine of the recording kind) leave float32 results as they were.
_KERNEL_CHANGING = ("amx", "avx512_bf16", "avx512_fp16")


def machine_record(name: str | None = None) -> Path:
    """The machine fixture `name` was recorded on: its own `<stem>.machine.json` where it has one (a fixture
    added later, recorded on another machine kind than the set), else the set's `machine.json`."""
    own = FIXTURES / f"{Path(name).stem}.machine.json" if name else None
    return own if own is not None and own.exists() else FIXTURES / "machine.json"


def machine_mismatch(name: str | None = None) -> str | None:
    """Why this machine's floats may differ from the recording of fixture `name` (the set's, when None):
    another CPU model or torch, a recorded flag missing here, or an extra flag that changes the kernels; None
    when they match."""
    recorded = json.loads(machine_record(name).read_text())
    here = machine()
    diff = [
        f"{k}: {recorded[k]!r} there, {here[k]!r} here"
        for k in ("cpu", "torch")
        if recorded.get(k) != here[k]
    ]
    missing = sorted(set(recorded["isa"]) - set(here["isa"]))
    extra = sorted(f for f in set(here["isa"]) - set(recorded["isa"]) if f.startswith(_KERNEL_CHANGING))
    if missing or extra:
        diff.append(f"isa: {missing} missing here, {extra} extra here")
    return "; ".join(diff) or None


def _rows(path: Path) -> list[dict[str, str]]:
    """metrics.csv's rows without empty cells and without the wall-clock columns (time/*)."""
    with open(path, newline="") as f:
        return [
            {k: v for k, v in r.items() if v != "" and not k.startswith("time/")} for r in csv.DictReader(f)
        ]


def fixture_rows(name: str) -> list[dict[str, str]]:
    return _rows(FIXTURES / name)


def run_rows(overrides: list[str], cwd: Path, env: dict, timeout: float = 600) -> list[dict[str, str]]:
    """Run `python -m twinkle_exp logger=csv *overrides` at one thread in `cwd`; its metrics.csv rows."""
    run_dir = cwd / "run"
    env = dict(env, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "twinkle_exp", "logger=csv", *overrides, f"hydra.run.dir={run_dir}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return _rows(run_dir / "metrics.csv")


def _commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


def record_one(loss: str) -> None:
    """Record `fast_<loss>.csv` alone on this machine, with its own machine record beside it (for a loss added
    on a machine of another kind than the set's: the set stays as recorded)."""
    import shutil
    import tempfile

    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
    with tempfile.TemporaryDirectory() as tmp:
        env["TWINKLE_CACHE"] = str(Path(tmp) / "cache")
        run_rows(fast_overrides(loss), Path(tmp), env, timeout=1800)
        shutil.copy(Path(tmp) / "run" / "metrics.csv", FIXTURES / f"fast_{loss}.csv")
    (FIXTURES / f"fast_{loss}.machine.json").write_text(
        json.dumps({**machine(), "threads": 1, "recorded_at": _commit()}, indent=1)
    )
    print("recorded", f"fast_{loss}.csv")


def record() -> None:
    """Re-record every fixture on this machine (one thread), with the machine it was recorded on (the
    per-fixture machine records go: the whole set is then of one machine)."""
    import shutil
    import tempfile

    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
    with tempfile.TemporaryDirectory() as tmp:
        env["TWINKLE_CACHE"] = str(Path(tmp) / "cache")
        for name, overrides in [(f"fast_{loss}.csv", fast_overrides(loss)) for loss in LOSSES] + [
            ("default.csv", ["trainer.enable_progress_bar=false"])
        ]:
            cwd = Path(tempfile.mkdtemp(dir=tmp))
            run_rows(overrides, cwd, env, timeout=1800)
            shutil.copy(cwd / "run" / "metrics.csv", FIXTURES / name)
            print("recorded", name)
    for own in FIXTURES.glob("fast_*.machine.json"):
        own.unlink()
    (FIXTURES / "machine.json").write_text(
        json.dumps({**machine(), "threads": 1, "recorded_at": _commit()}, indent=1)
    )


if __name__ == "__main__":
    # python tests/behaviour_fixtures.py            re-record the whole set
    # python tests/behaviour_fixtures.py <loss>...  record those losses' fixtures alone, each with its machine
    if sys.argv[1:]:
        for name in sys.argv[1:]:
            record_one(name)
    else:
        record()
