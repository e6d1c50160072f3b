"""Dynamic sampling (training/dynamic_sampling.py, `rollout.filter_zero_variance`) on hand-built rollouts and a
hand-built reward table: which groups are replaced, by which fresh prompts, the cap, the metrics, and the
rollout's layout after the join (sampling/rollout_groups.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from twinkle_exp import metric_names as M
from twinkle_exp.logprobs import IGNORE_INDEX
from twinkle_exp.sampling.generate import RolloutBatch
from twinkle_exp.sampling.rollout_groups import join, prompt_width, take_groups
from twinkle_exp.training import dynamic_sampling

G, PAD = 3, 0


def fake_rollout(prompts: list[str]) -> RolloutBatch:
    """G rows per prompt: the prompt's characters as ids, left-padded to the draw's longest, then a completion
    of 1 + (row % 3) tokens naming its prompt and row, right-padded; old log-probs -0.1 on the labels."""
    rows = [(p, j) for p in prompts for j in range(G)]
    width_p = max(len(p) for p in prompts)
    comps = [[ord(p[0]), 100 + j, 200][: 1 + j % 3] for p, j in rows]
    width_c = max(len(c) for c in comps)
    ids, attn, pos, labels = [], [], [], []
    for (p, _), c in zip(rows, comps, strict=True):
        left, right = width_p - len(p), width_c - len(c)
        ids.append([PAD] * left + [ord(ch) for ch in p] + c + [PAD] * right)
        attn.append([0] * left + [1] * (len(p) + len(c)) + [0] * right)
        pos.append([0] * left + list(range(len(p) + len(c))) + [0] * right)
        labels.append([IGNORE_INDEX] * width_p + c + [IGNORE_INDEX] * right)
    labels_t = torch.tensor(labels)
    return RolloutBatch(
        input_ids=torch.tensor(ids),
        attention_mask=torch.tensor(attn),
        position_ids=torch.tensor(pos),
        labels=labels_t,
        old_logps=torch.where(labels_t != IGNORE_INDEX, -0.1, 0.0),
        completion_ids=comps,
        completions=[f"{p}/{j}" for p, j in rows],
        truncated=torch.tensor([j == 2 for _, j in rows]),
        prompt_index=torch.arange(len(prompts)).repeat_interleave(G),
        group_size=G,
    )


@dataclass
class Scores:
    rewards: torch.Tensor
    per_fn: dict[str, torch.Tensor]


# The reward table: each prompt's G rewards. "same" ones are zero-variance.
REWARDS = {
    "p0": [0.0, 1.0, 0.0],
    "p1": [1.0, 1.0, 1.0],  # same
    "p2": [0.5, 0.0, 1.0],
    "p3": [0.0, 0.0, 0.0],  # same
    "f0": [0.2, 0.2, 0.2],  # same: a fresh prompt that does not replace anything
    "f1": [1.0, 0.0, 0.0],
    "f2": [0.0, 0.0, 1.0],
    "f3": [0.3, 0.3, 0.3],  # same
    "f4": [0.3, 0.3, 0.3],  # same
    "f5": [0.3, 0.3, 0.3],  # same
}


def scored(batch, rollout) -> Scores:
    r = torch.tensor([x for p in batch["prompts"] for x in REWARDS[p]])
    return Scores(r, {"half": r / 2})


class Fresh:
    def __init__(self) -> None:
        self.next, self.asked = 0, []

    def __call__(self, n: int) -> dict[str, list[str]]:
        self.asked.append(n)
        names = [f"f{self.next + i}" for i in range(n)]
        self.next += n
        return {"prompts": names, "answers": [f"a{p}" for p in names]}


def run(max_extra_draws: int, prompts=("p0", "p1", "p2", "p3")):
    batch = {"prompts": list(prompts), "answers": [f"a{p}" for p in prompts]}
    rollout = fake_rollout(batch["prompts"])
    fresh, drawn = Fresh(), []

    def draw(ps):
        drawn.append(list(ps))
        return fake_rollout(ps)

    out = dynamic_sampling.refill(
        batch, rollout, scored(batch, rollout), draw=draw, score=scored, fresh=fresh,
        max_extra_draws=max_extra_draws, pad_id=PAD,
    )  # fmt: skip
    return out, fresh, drawn


def rows_of(rollout: RolloutBatch) -> list[tuple[list[int], list[int]]]:
    """Each row's real tokens and its labelled ones, padding stripped: what a join must keep."""
    out = []
    for ids, attn, lab in zip(rollout.input_ids, rollout.attention_mask, rollout.labels, strict=True):
        out.append((ids[attn.bool()].tolist(), lab[lab != IGNORE_INDEX].tolist()))
    return out


def test_zero_variance_groups_are_replaced_in_place_by_the_next_varying_fresh_groups():
    out, fresh, drawn = run(max_extra_draws=4)
    # Pass 1 asks for 2 (p1, p3): f0 is zero-variance too, f1 replaces p1; pass 2 asks for 1: f2 replaces p3.
    assert fresh.asked == [2, 1] and drawn == [["f0", "f1"], ["f2"]]
    assert out.batch == {"prompts": ["p0", "f1", "p2", "f2"], "answers": ["ap0", "af1", "ap2", "af2"]}
    want = [x for p in out.batch["prompts"] for x in REWARDS[p]]
    assert out.rewards.tolist() == want and out.per_fn["half"].tolist() == [x / 2 for x in want]
    assert out.rollout.completions == [f"{p}/{j}" for p in out.batch["prompts"] for j in range(G)]
    assert rows_of(out.rollout) == rows_of(fake_rollout(out.batch["prompts"]))
    assert out.rollout.truncated.tolist() == [j == 2 for _ in range(4) for j in range(G)]
    assert out.rollout.prompt_index.tolist() == [g for g in range(4) for _ in range(G)]
    assert out.metrics == {
        M.DYNAMIC_DROPPED_FRACTION: 0.5,
        M.DYNAMIC_EXTRA_SAMPLES: 3.0 * G,
        M.DYNAMIC_EXTRA_DRAWS: 2.0,
        M.DYNAMIC_ZERO_VARIANCE_LEFT: 0.0,
        M.DYNAMIC_CAP_HIT: 0.0,
    }


def test_at_the_cap_the_rollout_trains_on_what_it_has_and_says_so():
    out, fresh, _ = run(max_extra_draws=1)
    assert fresh.asked == [2]
    assert out.batch["prompts"] == ["p0", "f1", "p2", "p3"]  # p3 stays: the one pass found one replacement
    assert out.rewards.tolist() == [x for p in ["p0", "f1", "p2", "p3"] for x in REWARDS[p]]
    assert out.metrics[M.DYNAMIC_ZERO_VARIANCE_LEFT] == 1.0 and out.metrics[M.DYNAMIC_CAP_HIT] == 1.0
    assert out.metrics[M.DYNAMIC_EXTRA_DRAWS] == 1.0 and out.metrics[M.DYNAMIC_EXTRA_SAMPLES] == 2.0 * G


def test_a_rollout_without_zero_variance_groups_draws_nothing_and_is_unchanged():
    out, fresh, drawn = run(max_extra_draws=4, prompts=("p0", "p2"))
    assert fresh.asked == [] and drawn == []
    assert out.batch["prompts"] == ["p0", "p2"]
    whole = fake_rollout(["p0", "p2"])
    for name in ("input_ids", "attention_mask", "position_ids", "labels", "old_logps", "truncated"):
        assert torch.equal(getattr(out.rollout, name), getattr(whole, name)), name
    assert out.metrics[M.DYNAMIC_DROPPED_FRACTION] == 0.0 and out.metrics[M.DYNAMIC_EXTRA_SAMPLES] == 0.0


def test_a_non_finite_group_is_replaced_too():
    assert dynamic_sampling.zero_variance(
        torch.tensor([0.0, 1.0, float("nan"), 1.0, 0.5, 0.5]), 2
    ).tolist() == [
        False,
        True,
        True,
    ]


def test_join_pads_each_part_to_the_widest_prompt_and_completion():
    short, long = fake_rollout(["ab"]), fake_rollout(["abcdef"])
    joined = join([short, long], pad_id=PAD)
    assert prompt_width(joined) == 6 and joined.input_ids.shape[1] == 6 + 3
    assert rows_of(joined) == rows_of(short) + rows_of(long)
    # positions restart at 0 on each row's first real token; padding is position 0, attention 0, label -100
    real = joined.attention_mask.bool()
    assert (joined.position_ids[~real] == 0).all() and (joined.labels[~real] == IGNORE_INDEX).all()
    assert torch.equal(joined.old_logps != 0, joined.labels != IGNORE_INDEX)
    assert (
        joined.completion_lengths.tolist()
        == short.completion_lengths.tolist() + long.completion_lengths.tolist()
    )


def test_take_groups_picks_whole_groups_in_the_order_asked():
    r = fake_rollout(["p0", "p1", "p2"])
    picked = take_groups(r, [2, 0])
    assert picked.completions == [f"p{g}/{j}" for g in (2, 0) for j in range(G)]
    assert rows_of(picked) == rows_of(r)[2 * G :] + rows_of(r)[:G]


def test_join_refuses_rollouts_drawn_differently():
    a = fake_rollout(["p0"])
    b = fake_rollout(["p1"])
    b.temperature = 0.5
    with pytest.raises(ValueError, match="drawn with different"):
        join([a, b], pad_id=PAD)


@pytest.mark.slow
def test_dynamic_sampling_trains_from_the_command_line(run_cli, tmp_path):
    import csv
    import math

    proc = run_cli("rollout.filter_zero_variance=true", "debug=fast", "logger=csv", "trainer.max_steps=4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (metrics,) = tmp_path.glob("outputs/*/*/metrics.csv")
    with open(metrics, newline="") as f:
        rows = list(csv.DictReader(f))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses)
    dropped = [float(r[M.DYNAMIC_DROPPED_FRACTION]) for r in rows if r.get(M.DYNAMIC_DROPPED_FRACTION)]
    assert dropped and all(0.0 <= v <= 1.0 for v in dropped)


def test_a_rank_with_nothing_to_replace_follows_the_others_passes(monkeypatch):
    # Another rank still has zero-variance groups: this one draws one prompt's group per pass and drops it.
    monkeypatch.setattr(dynamic_sampling.collectives, "any_rank", lambda flag: True)
    out, fresh, drawn = run(max_extra_draws=3, prompts=("p0", "p2"))
    assert fresh.asked == [1, 1, 1] and drawn == [["f0"], ["f1"], ["f2"]]
    assert out.batch["prompts"] == ["p0", "p2"]
    assert out.metrics[M.DYNAMIC_EXTRA_DRAWS] == 3.0 and out.metrics[M.DYNAMIC_EXTRA_SAMPLES] == 3.0 * G
    assert out.metrics[M.DYNAMIC_CAP_HIT] == 0.0  # this rank has none left (the sum over ranks decides)
