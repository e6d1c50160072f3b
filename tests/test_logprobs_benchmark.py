"""The log-prob benchmark times every method in subprocesses, and the chunk size follows the device."""

from __future__ import annotations

import pytest

from benchmarks import logprobs
from twinkle_exp.logprobs.chunked_softmax import CHUNK_ELEMENTS, CUDA_CHUNK_ELEMENTS, chunk_elements


def test_chunks_are_larger_on_a_gpu():
    assert chunk_elements("cpu") == CHUNK_ELEMENTS
    assert chunk_elements("cuda") == CUDA_CHUNK_ELEMENTS > CHUNK_ELEMENTS


@pytest.mark.slow
def test_benchmark_prints_every_method_with_its_chunks_and_passes(capsys):
    sizes = [
        "--device=cpu",
        "--tokens=64",
        "--hidden=16",
        "--vocab=512",
        "--threads=1",
        "--dtypes",
        "float32",
    ]
    logprobs.main([*sizes, "--repeats=1", "--iters=2", "--chunk-elements=4096"])
    out = capsys.readouterr().out
    assert "chunks of 4096 float32 logits" in out and "median of 2 passes" in out
    rows = {line.split()[1]: line.split() for line in out.splitlines() if line.startswith("float32 ")}
    assert set(rows) == {"hidden", "naive", "selective"}
    assert rows["naive"][3] == "100%" and rows["naive"][5] == "1.00x"
    assert all(float(row[4]) > 0 for row in rows.values())  # wall seconds
