"""The step-changes benchmark times each old and new path in turn and prints them with the load."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("peft")

from benchmarks import step_changes  # noqa: E402


def test_interleaved_calls_each_variant_in_turn() -> None:
    calls = []
    times = step_changes.interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 3, 1)
    assert calls == ["a", "b"] + ["a", "b"] * 3  # warm-up, then alternating
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3}


@pytest.mark.usefixtures("one_thread")  # conftest.py
def test_both_cases_print_every_variant_and_leave_the_switch_as_it_was(capsys, monkeypatch) -> None:
    monkeypatch.delenv("TRANSFORMERS_SDPA_FORCE_GQA", raising=False)
    step_changes.main(["--cases=lora,gqa", "--model=tiny", "--rows=8", "--iters=8", "--threads=1"])
    out = capsys.readouterr().out
    assert "before: load average" in out and "after: load average" in out
    for name in (
        "peft lora.Linear",
        "fused (policy.lora.fused)",
        "no-grad pass, copies",
        "no-grad pass, grouped",
        "forward+backward, copies",
        "forward+backward, grouped",
    ):
        line = next(line for line in out.splitlines() if line.strip().startswith(name))
        assert float(line.split("median")[1].split()[0]) > 0
    assert "TRANSFORMERS_SDPA_FORCE_GQA" not in os.environ


def test_an_unknown_case_is_refused() -> None:
    with pytest.raises(SystemExit, match=r"unknown \['nope'\]"):
        step_changes.main(["--cases=lora,nope"])


@pytest.mark.usefixtures("one_thread")
def test_the_sampler_cases_time_both_paths_and_say_how_many_rows_had_ended(capsys) -> None:
    step_changes.main(["--cases=rollout,greedy", "--model=tiny", "--sampler-iters=1", "--threads=1"])
    out = capsys.readouterr().out
    for case in ("rollout", "greedy"):
        section = out.split(f"{case} (tiny, 24 new tokens)")[1].splitlines()
        assert section[1].strip().startswith("cascade, every row") and "median" in section[1]
        assert section[2].strip().startswith("cascade, ended dropped") and "median" in section[2]
        assert "of the decoding steps' rows had ended" in section[3]
