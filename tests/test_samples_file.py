"""samples.jsonl: the rows a rollout keeps, the size cap, a torn last line, the resume's cut; and a real run
that writes it, is resumed, and keeps every rollout's rows exactly once."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from cli_run_helpers import check_ok, run_twinkle

from twinkle_exp.tracking.samples_file import (
    FIELDS,
    SAMPLES_JSONL,
    SamplesFile,
    choose_rows,
    read_samples,
    truncate_samples,
)

N, G = 8, 4  # rows of a rollout, completions per prompt


def rollout(step: int, index: int, truncated=None, repeats=None, text: str = "c") -> dict:
    """`SamplesFile.write_rollout`'s arguments for one rollout of N rows in groups of G."""
    return dict(
        step=step,
        rollout=index,
        prompts=[f"p{i // G}" for i in range(N)],
        completions=[f"{text}{i}" for i in range(N)],
        answers=[f"a{i // G}" for i in range(N)],
        rewards=torch.arange(N, dtype=torch.float32) / N,
        per_fn={"exact": torch.zeros(N), "format": torch.ones(N)},
        advantages=torch.linspace(-1, 1, 2 * N),  # the global batch: two ranks' rows, this rank's first
        lengths=torch.full((N,), 5),
        truncated=torch.zeros(N, dtype=torch.bool) if truncated is None else truncated,
        repeats=torch.zeros(N, dtype=torch.bool) if repeats is None else repeats,
        group_size=G,
    )


def test_the_first_row_of_each_group_and_the_first_cut_off_and_repeating_ones():
    none = [False] * N
    assert choose_rows(N, G, 4, none, none) == [0, 4]  # two groups only
    assert choose_rows(N, G, 1, none, none) == [0]
    cut = [i == 6 for i in range(N)]
    repeating = [i in (0, 3) for i in range(N)]
    assert choose_rows(N, G, 1, cut, repeating) == [0, 6]  # row 0 already repeats
    assert choose_rows(N, G, 0, cut, none) == [6]


def test_a_rollout_writes_its_rows_with_every_field(tmp_path):
    path = tmp_path / SAMPLES_JSONL
    samples = SamplesFile(path, per_rollout=4, max_bytes=10**6)
    cut = torch.tensor([i == 5 for i in range(N)])
    assert samples.write_rollout(**rollout(2, 0, truncated=cut)) == 3
    rows, problems = read_samples(path)
    assert problems == []
    assert [r["row"] for r in rows] == [0, 4, 5]
    assert all(tuple(r) == FIELDS for r in rows)
    five = rows[2]
    assert five["step"] == 2 and five["rollout"] == 0 and five["prompt"] == "p1" and five["answer"] == "a1"
    assert five["completion"] == "c5" and five["reward"] == 5 / N and five["length"] == 5
    assert five["rewards"] == {"exact": 0.0, "format": 1.0}
    assert five["advantage"] == pytest.approx(torch.linspace(-1, 1, 2 * N)[5].item())
    assert five["truncated"] is True and five["repeats_prompt"] is False


def test_no_file_with_zero_rows(tmp_path):
    path = tmp_path / SAMPLES_JSONL
    assert SamplesFile(path, per_rollout=0, max_bytes=10**6).write_rollout(**rollout(2, 0)) == 0
    assert not path.exists()


def test_past_the_cap_only_the_final_rollout_is_added(tmp_path, caplog):
    path = tmp_path / SAMPLES_JSONL
    samples = SamplesFile(path, per_rollout=2, max_bytes=600)
    for i in range(20):
        samples.write_rollout(**rollout(2 * i + 2, i))
    samples.write_rollout(**rollout(42, 20), final=True)
    rows, _ = read_samples(path)
    kept = sorted({r["rollout"] for r in rows})
    assert kept[-1] == 20 and len(kept) < 10 and kept == [*range(len(kept) - 1), 20]
    assert (
        path.stat().st_size < 600 + 2 * 400
    )  # the cap, overshot by the last rollout written under it and the final one
    assert sum("reached trainer.samples_file_mb" in r.message for r in caplog.records) == 1


def test_a_torn_last_line_is_skipped_and_said(tmp_path):
    path = tmp_path / SAMPLES_JSONL
    samples = SamplesFile(path, per_rollout=2, max_bytes=10**6)
    samples.write_rollout(**rollout(2, 0))
    with open(path, "a") as f:
        f.write('{"step": 4, "rollout": 1, "row": 0, "prompt": "p0", "compl')  # killed mid-write
    rows, problems = read_samples(path)
    assert len(rows) == 2
    assert problems == [
        f"{SAMPLES_JSONL}: skipped 1 unreadable line(s) (line 3; a run killed while writing tears its last line)"
    ]


def test_a_resume_keeps_the_rollouts_its_checkpoint_finished(tmp_path):
    path = tmp_path / SAMPLES_JSONL
    samples = SamplesFile(path, per_rollout=2, max_bytes=10**6)
    for i in range(5):
        samples.write_rollout(**rollout(2 * i + 2, i))
    with open(path, "a") as f:
        f.write('{"step": 12, "rollo')
    assert truncate_samples(path, rollouts_done=3) == 6
    rows, problems = read_samples(path)
    assert problems == [] and sorted({r["rollout"] for r in rows}) == [0, 1, 2]
    assert not path.with_name(SAMPLES_JSONL + ".tmp").exists()
    assert truncate_samples(tmp_path / "none.jsonl", 3) == 0
    before = path.stat().st_ino
    assert truncate_samples(path, rollouts_done=3) == 6 and path.stat().st_ino == before  # nothing to drop


def test_unicode_and_markup_survive_the_round_trip(tmp_path):
    path = tmp_path / SAMPLES_JSONL
    SamplesFile(path, per_rollout=1, max_bytes=10**6).write_rollout(**rollout(2, 0, text="<b>é\n"))
    [row], _ = read_samples(path)
    assert row["completion"] == "<b>é\n0"


@pytest.mark.slow
def test_a_resumed_run_keeps_every_rollouts_rows_once(tmp_path, cli_env):
    run_dir = tmp_path / "run"
    # debug=fast: a rollout is 4 optimizer steps. The first attempt stops at step 6, half-way through rollout
    # 1, whose rows it writes after its checkpoint; the second resumes there, drops them, and writes them again.
    for steps in (6, 8):
        args = ["debug=fast", "logger=csv", "trainer.save_checkpoint=true", f"trainer.max_steps={steps}"]
        check_ok(run_twinkle([*args, f"hydra.run.dir={run_dir}"], tmp_path, cli_env))
    rows, problems = read_samples(run_dir / SAMPLES_JSONL)
    assert problems == []
    info = json.loads((run_dir / "run.json").read_text())
    per_rollout = Counter(r["rollout"] for r in rows)
    assert sorted(per_rollout) == list(range(info["final"]["rollouts"]))
    assert len({(r["rollout"], r["row"]) for r in rows}) == len(rows)  # none written twice
    assert {r["step"] for r in rows if r["rollout"] == 1} == {8}  # the resumed run's, not the cut one's
    assert len(info["attempts"]) == 2
