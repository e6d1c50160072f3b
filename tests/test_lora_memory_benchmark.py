"""The LoRA memory benchmark runs its cases in subprocesses and prints one row per case."""

from __future__ import annotations

import pytest

from benchmarks import lora_memory

TINY = [
    "--hidden=32",
    "--intermediate=64",
    "--layers=1",
    "--heads=2",
    "--kv-heads=1",
    "--vocab=200",
    "--seq=16",
]


@pytest.mark.slow
def test_benchmark_prints_a_row_per_case_and_the_load(capsys):
    lora_memory.main(["--repeats=1", "--steps=1", "--cases=full,lora", *TINY])
    out = capsys.readouterr().out
    assert "load average before:" in out and "load average after:" in out
    rows = {
        line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (["full"], ["lora"])
    }
    assert set(rows) == {"full", "lora"}
    params, trained, copy = (float(x) for x in rows["full"][1:4])
    assert params == trained == copy > 0  # full fine-tuning trains everything and copies it for the reference
    params, trained, copy = (float(x) for x in rows["lora"][1:4])
    assert 0 < trained < params and copy == 0  # LoRA trains the adapters and copies nothing
    assert all(float(rows[c][5]) > 0 for c in rows)  # a peak was measured


def test_unknown_case_is_refused():
    with pytest.raises(SystemExit, match="unknown \\['nope'\\]"):
        lora_memory.main(["--cases=full,nope"])
