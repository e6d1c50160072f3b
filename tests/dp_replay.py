"""Replay the union of the ranks' rollouts (recorded by `dp_capture`) in one process, and compare.

The 1-process replay trains on the union of the ranks' rollouts (rank 0's rows first) with every other
stage left as the code does it (rewards, advantages, reference pass, update, metrics, validation), so the
two runs compare like for like.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import torch
from dp_capture import Patch, Recorder, load_captures


def _pad_right(t: torch.Tensor, width: int, value: float) -> torch.Tensor:
    """`[N, T]` -> `[N, width]`: extra columns after every real token change no real token's result."""
    return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)


def union_rollout(captures: list[dict[str, Any]]) -> tuple[dict[str, list[str]], Any]:
    """The global batch of the ranks' first rollouts: their prompts and one `RolloutBatch`, rank 0 first."""
    from twinkle_exp.sampling.generate import RolloutBatch

    batches = [c["batches"][0] for c in captures]
    rollouts = [c["rollouts"][0] for c in captures]
    width = max(r["input_ids"].shape[1] for r in rollouts)
    pads = {"input_ids": 0, "attention_mask": 0, "position_ids": 0, "labels": -100, "old_logps": 0.0}
    fields: dict[str, Any] = {
        name: torch.cat([_pad_right(r[name], width, value) for r in rollouts]) for name, value in pads.items()
    }
    offsets = itertools.accumulate([0] + [len(b["prompts"]) for b in batches[:-1]])
    fields["prompt_index"] = torch.cat(
        [r["prompt_index"] + o for r, o in zip(rollouts, offsets, strict=True)]
    )
    fields["truncated"] = torch.cat([r["truncated"] for r in rollouts])
    fields["completion_ids"] = [ids for r in rollouts for ids in r["completion_ids"]]
    fields["completions"] = [text for r in rollouts for text in r["completions"]]
    fields["group_size"] = rollouts[0]["group_size"]
    prompts = {key: [x for b in batches for x in b[key]] for key in ("prompts", "answers")}
    return prompts, RolloutBatch(**fields)


def install_replay(patch: Patch, prompts: dict[str, list[str]], rollout: Any) -> None:
    """Make a 1-process run train on `prompts` and `rollout` (from `union_rollout`) instead of sampling."""
    from twinkle_exp.tasks.prompt_stream import PromptStream
    from twinkle_exp.training.module import PolicyModule

    def replayed(module, batch_prompts):
        assert batch_prompts == prompts["prompts"]
        return type(rollout)(
            **{k: v.to(module.device) if torch.is_tensor(v) else v for k, v in vars(rollout).items()}
        )

    patch(PromptStream, "__iter__", lambda self: itertools.repeat(prompts))
    patch(PolicyModule, "_rollout", replayed)


def relative_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """||a - b|| / ||b|| over all tensors together (`b` the reference)."""
    assert a.keys() == b.keys()
    num = sum(float((a[k].double() - b[k].double()).pow(2).sum()) for k in b)
    den = sum(float(b[k].double().pow(2).sum()) for k in b)
    return (num / max(den, 1e-300)) ** 0.5


def update_of(capture: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The first optimizer step's weight change, per parameter."""
    return {k: capture["after"][k] - capture["before"][k] for k in capture["before"]}


# Overrides that choose how many processes run, or how they shard: the replay runs in one plain process.
_PARALLEL_KEYS = (
    "trainer",
    "trainer.devices",
    "trainer.strategy",
    "trainer.num_nodes",
    "trainer.accelerator",
)
NOT_COMPARED = ("time/",)  # wall-clock figures differ between any two runs


def single_process_overrides(job_dir: Path) -> list[str]:
    """The job's own overrides (as its rank 0 saved them), with the parallel settings for one CPU process."""
    import yaml

    saved = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text())
    kept = [o for o in saved if o.split("=", 1)[0].lstrip("+~") not in _PARALLEL_KEYS]
    return [*kept, "trainer=cpu", "trainer.accelerator=cpu", "trainer.devices=1"]


def replay_job(job_dir: Path, work_dir: Path, patch: Patch) -> dict[str, Any]:
    """Train the union batch of the job in `job_dir` in this process (cwd `work_dir`); returns its record.

    `patch` must undo itself afterwards (pytest's monkeypatch.setattr, or `Patcher`).
    """
    import os

    from hydra import compose, initialize_config_module

    import twinkle_exp.cli  # noqa: F401  (registers the config schemas)
    from twinkle_exp.run import train

    prompts, rollout = union_rollout(load_captures(job_dir))
    install_replay(patch, prompts, rollout)
    recorder = Recorder()
    recorder.install(patch)
    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=single_process_overrides(job_dir))
    work_dir.mkdir(parents=True, exist_ok=True)
    cwd = os.getcwd()
    os.chdir(work_dir)
    try:
        train(cfg)
    finally:
        os.chdir(cwd)
    return recorder.data


class Patcher:
    """setattr that remembers the old values; `undo()` restores them (for use outside pytest)."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def __call__(self, obj: Any, name: str, value: Any) -> None:
        self._saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def undo(self) -> None:
        while self._saved:
            obj, name, value = self._saved.pop()
            setattr(obj, name, value)


def read_metrics(path: Path) -> dict[tuple[int, str], float]:
    """metrics.csv as {(step, key): value}, leaving out the keys no two runs share (wall-clock times)."""
    import csv

    out: dict[tuple[int, str], float] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            step = int(float(row["step"]))
            for key, value in row.items():
                if key != "step" and value != "" and not key.startswith(NOT_COMPARED):
                    out[(step, key)] = float(value)
    return out


def metric_differences(
    got: dict[tuple[int, str], float], want: dict[tuple[int, str], float], rtol: float, atol: float
) -> list[str]:
    """Every (step, key) whose values differ beyond `atol + rtol * |want|`, or that only one run logged."""
    problems = [f"{k}: only in one run" for k in sorted(got.keys() ^ want.keys())]
    for k in sorted(got.keys() & want.keys()):
        if abs(got[k] - want[k]) > atol + rtol * abs(want[k]):
            problems.append(f"{k}: {got[k]!r} != {want[k]!r}")
    return problems
