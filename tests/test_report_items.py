"""Held-out items as data (issue 45, item 3): items.jsonl's writer and reader, and the crossed seeds x items
split of a pair's final-accuracy interval that the report's *Held-out items* section states."""

from __future__ import annotations

import json

import numpy as np
import pytest

from twinkle_exp.report.statistics.items import crossed_split
from twinkle_exp.tracking.items_file import ITEMS_JSONL, ItemsFile, read_items


def test_the_file_is_one_line_per_validation_capped_and_read_back_despite_a_torn_line(tmp_path):
    path = tmp_path / ITEMS_JSONL
    assert read_items(path) == ([], [])  # no file: nothing, and nothing created by reading
    assert not path.exists()
    items = ItemsFile(path)
    assert items.write_validation(step=0, rollout=0, item=[0, 1, 2], greedy=[1.0, 0.0, 1.0])
    assert items.write_validation(
        step=10, rollout=5, item=[0, 1, 2], greedy=[1, 1, 0], sampled_mean=[0.5, 0.25, 0.0],
        pass_at={1: [0.5, 0.25, 0.0], 4: [1.0, 0.75, 0.0]},
    )  # fmt: skip
    # A resumed run validates step 10 again: the later line replaces the earlier one when read.
    items.write_validation(step=10, rollout=5, item=[0, 1, 2], greedy=[1, 1, 1])
    with path.open("a") as f:
        f.write('{"step": 20, "item": [0, 1')  # a kill tore the last line
    rows, problems = read_items(path)
    assert [r["step"] for r in rows] == [0, 10] and rows[1]["greedy"] == [1.0, 1.0, 1.0]
    assert problems and "skipped 1 unreadable line" in problems[0]
    with pytest.raises(ValueError, match="different lengths"):
        items.write_validation(step=30, rollout=6, item=[0, 1], greedy=[1.0])
    capped = ItemsFile(tmp_path / "capped.jsonl", max_bytes=10)
    assert capped.write_validation(step=0, rollout=0, item=[0], greedy=[1.0])
    assert not capped.write_validation(step=1, rollout=1, item=[0], greedy=[1.0])  # past its cap
    assert len((tmp_path / "capped.jsonl").read_text().splitlines()) == 1
    assert json.loads(path.read_text().splitlines()[1])["pass_at"] == {
        "1": [0.5, 0.25, 0.0],
        "4": [1.0, 0.75, 0.0],
    }


def simulate(rng, seeds, items, logit_sd=6.0, gap_sd=4.0, seed_sd=0.3):
    """Per-seed, per-item correctness differences `[seeds, items]` of two variants with the same mean on the
    task: a fresh sample of prompts, each with its difficulty (logit sd `logit_sd`: most prompts always right
    or always wrong, as greedy decoding makes them) and its own gap between the variants (sd `gap_sd`,
    symmetric: no difference on average over prompts); each seed shifts each variant by its own amount."""
    logit = rng.normal(0.0, logit_sd, items)
    gap = rng.normal(0.0, gap_sd, items)
    shift = rng.normal(0.0, seed_sd, (2, seeds, 1))
    p_a, p_b = 1 / (1 + np.exp(-(logit + shift[0]))), 1 / (1 + np.exp(-(logit + gap + shift[1])))
    return (rng.random((seeds, items)) < p_a).astype(float) - (rng.random((seeds, items)) < p_b)


def test_the_crossed_interval_covers_when_items_vary_and_the_seeds_only_one_does_not():
    rng = np.random.default_rng(45)
    sims, covered_items, covered_seeds, shares = 400, 0, 0, []
    for _ in range(sims):
        split = crossed_split(simulate(rng, seeds=5, items=128))
        covered_items += split.with_items[0] <= 0 <= split.with_items[1]
        covered_seeds += split.seeds_only[0] <= 0 <= split.seeds_only[1]
        shares.append(split.item_share)
    # Measured: 94.5% with the items, 76.5% with the seeds alone; the items 74% of the variance (median).
    assert covered_items / sims >= 0.92 and covered_seeds / sims < 0.85
    assert np.median(shares) > 0.5


def test_a_split_needs_two_seeds_and_two_items_and_zero_differences_add_nothing():
    with pytest.raises(ValueError, match="2 seeds and 2 items"):
        crossed_split(np.zeros((1, 5)))
    flat = crossed_split(np.zeros((3, 4)))
    assert flat.difference == 0 and flat.item_share == 0.0


def test_a_task_splits_its_held_out_set_into_a_tuning_and_a_verdict_part():
    from twinkle_exp.tasks.reverse import ReverseTask

    whole = ReverseTask(num_validation=40)
    tuning = ReverseTask(num_validation=40, held_out_part="tuning", tuning_share=0.25)
    verdict = ReverseTask(num_validation=40, held_out_part="verdict", tuning_share=0.25)
    prompts = [[e.prompt for e in t.validation_set()] for t in (whole, tuning, verdict)]
    assert len(prompts[1]) == 10 and len(prompts[2]) == 30 and prompts[1] + prompts[2] == prompts[0]
    import random

    drawn = {e.prompt for e in verdict.sample(2000, random.Random(0))}
    assert not drawn & set(prompts[0])  # neither part is ever trained on
    with pytest.raises(ValueError, match="held_out_part"):
        ReverseTask(num_validation=40, held_out_part="test")
    with pytest.raises(ValueError, match="empty part"):
        ReverseTask(num_validation=40, held_out_part="verdict", tuning_share=1.0)
