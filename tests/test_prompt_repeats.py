"""A completion repeats its prompt when runs of REPEAT_RUN consecutive token ids of it cover most of its
tokens; the share is logged with each rollout's metrics and a rollout where most do is warned of, quoting a
few."""

from __future__ import annotations

import logging

import pytest
import torch

from twinkle_exp import metric_names as M
from twinkle_exp.logprobs import IGNORE_INDEX
from twinkle_exp.loss.advantages import group_advantages
from twinkle_exp.sampling.generate import RolloutBatch
from twinkle_exp.training.prompt_repeats import (
    REPEAT_RUN,
    REPEAT_SHARE,
    repeats_prompt,
    rollout_repeats_prompt,
)
from twinkle_exp.training.rollout_metrics import RolloutRows, TruncationWatch, rollout_metrics

PAD = 0
PROMPT = list(range(10, 20))  # 10 tokens
SHORT = [30, 31, 32]  # shorter than REPEAT_RUN: can never be repeated


def padded(rows: list[list[int]], left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """`[N, W]` ids and mask of `rows`, padded on the left or the right with PAD."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        span = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, span], mask[i, span] = torch.tensor(r), 1
    return ids, mask


CASES = [  # (prompt, completion, repeats?)
    (PROMPT, [7, *PROMPT[2 : 2 + REPEAT_RUN], 8], True),  # a run of exactly REPEAT_RUN, mid-completion
    (PROMPT, PROMPT[: REPEAT_RUN - 1] + [99] + PROMPT[REPEAT_RUN:], False),  # broken after REPEAT_RUN - 1
    (PROMPT, [PROMPT[i] for i in (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)], False),  # every token, never in order
    (PROMPT, [1, 2, 3], False),  # short answer
    (SHORT, SHORT * 4, False),  # the prompt is shorter than a run
    (PROMPT, list(reversed(PROMPT)), False),
]


def test_repeats_are_runs_of_the_rows_own_prompt_ids():
    p_ids, p_mask = padded([c[0] for c in CASES], left=True)
    c_ids, c_mask = padded([c[1] for c in CASES], left=False)
    got = repeats_prompt(p_ids, p_mask, c_ids, c_mask)
    assert got.tolist() == [c[2] for c in CASES]


def test_a_restatement_followed_by_an_answer_is_not_a_repeat():
    """`59 + 63 = 122<eos>` copies 6 of its 11 tokens (EOS aside), `59 + 63 =<eos>` 6 of 7."""
    run, eos = PROMPT[:REPEAT_RUN], 2
    answered, restated = [*run, 90, 91, 92, 93, 94, eos], [*run, 90, eos]
    p_ids, p_mask = padded([PROMPT, PROMPT], left=True)
    c_ids, c_mask = padded([answered, restated], left=False)
    ends = torch.tensor([True, True])
    assert repeats_prompt(p_ids, p_mask, c_ids, c_mask, ends_with_eos=ends).tolist() == [False, True]
    assert 6 / 11 < REPEAT_SHARE <= 6 / 7
    # Counted with its EOS the restatement covers 6 of 8: still above the share; the answer 6 of 12.
    assert repeats_prompt(p_ids, p_mask, c_ids, c_mask).tolist() == [False, True]


def test_padding_never_makes_a_run():
    # The prompt's left padding and the completion's right padding are PAD runs longer than REPEAT_RUN.
    p_ids, p_mask = padded([SHORT, PROMPT], left=True)  # 7 PADs before SHORT
    c_ids, c_mask = padded([[1], [PROMPT[0]]], left=False)
    c_ids = torch.cat([c_ids, torch.full((2, 12), PAD)], dim=1)
    c_mask = torch.cat([c_mask, torch.zeros(2, 12, dtype=torch.long)], dim=1)
    assert repeats_prompt(p_ids, p_mask, c_ids, c_mask).tolist() == [False, False]
    # The same PAD ids inside the masks do count: they are tokens the model saw and wrote.
    p_ids, p_mask = padded([[PAD] * 10], left=True)
    c_ids, c_mask = padded([[PAD] * REPEAT_RUN], left=False)
    assert repeats_prompt(p_ids, p_mask, c_ids, c_mask).tolist() == [True]


def test_another_rows_prompt_does_not_count():
    other = list(range(40, 50))
    p_ids, p_mask = padded([PROMPT, other], left=True)
    c_ids, c_mask = padded([other, PROMPT], left=False)
    assert repeats_prompt(p_ids, p_mask, c_ids, c_mask).tolist() == [False, False]
    assert repeats_prompt(p_ids, p_mask, c_ids, c_mask, min_run=1).tolist() == [False, False]
    with pytest.raises(ValueError, match="min_run"):
        repeats_prompt(p_ids, p_mask, c_ids, c_mask, min_run=0)


def rollout_of(prompts: list[list[int]], completions: list[list[int]]) -> RolloutBatch:
    """A rollout laid out as generate lays it out: left-padded prompts, then right-padded completions."""
    p_ids, p_mask = padded(prompts, left=True)
    c_ids, c_mask = padded(completions, left=False)
    n = len(prompts)
    return RolloutBatch(
        input_ids=torch.cat([p_ids, c_ids], 1),
        attention_mask=torch.cat([p_mask, c_mask], 1),
        position_ids=torch.zeros(n, p_ids.shape[1] + c_ids.shape[1], dtype=torch.long),
        labels=torch.cat(
            [torch.full_like(p_ids, IGNORE_INDEX), c_ids.masked_fill(c_mask == 0, IGNORE_INDEX)], 1
        ),
        old_logps=torch.zeros(n, p_ids.shape[1] + c_ids.shape[1]),
        completion_ids=completions,
        completions=[str(c) for c in completions],
        truncated=torch.ones(n, dtype=torch.bool),  # hand-built rows: no closing EOS to set aside
        prompt_index=torch.arange(n),
        group_size=1,
    )


def test_a_rollouts_prompt_and_completion_are_split_where_generate_joined_them():
    rollout = rollout_of([PROMPT, SHORT, PROMPT], [[5], PROMPT[:REPEAT_RUN], PROMPT[1 : 1 + REPEAT_RUN]])
    assert rollout_repeats_prompt(rollout).tolist() == [False, False, True]


def test_the_share_is_a_rollout_metric_over_the_gathered_rows():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    rows = RolloutRows(
        rewards,
        {"exact": rewards},
        torch.tensor([2, 3, 1, 4]),
        torch.zeros(4, dtype=torch.bool),
        repeats_prompt=torch.tensor([True, False, True, True]),
    ).gathered()
    assert rows.repeats_prompt.dtype == torch.bool and rows.lengths.tolist() == [2, 3, 1, 4]
    metrics = rollout_metrics(
        rows, group_advantages(rows.rewards, 2), {M.TIME_ROLLOUT: 1.0, M.TIME_UPDATE: 1.0}, epochs=1
    )
    assert metrics[M.COMPLETION_REPEATS_PROMPT_RATIO] == pytest.approx(0.75)
    without = RolloutRows(rewards, {"exact": rewards}, torch.tensor([2, 3, 1, 4]), torch.zeros(4).bool())
    assert without.gathered().repeats_prompt is None


def test_a_rollout_mostly_repeating_its_prompts_is_warned_of_with_examples(caplog):
    watch = TruncationWatch(max_new_tokens=12, truncated_max=None, every=2)
    examples = ["What is 59 + 63? Reply with just the number. What is 59 + 63? Reply", "59 + 63 = 59", "x"]
    with caplog.at_level(logging.WARNING, logger="twinkle_exp.training.rollout_metrics"):
        said = [watch.observe_repeats(r, s, examples) for s, r in [(4, 0.5), (8, 0.9), (12, 0.8), (16, 1.0)]]
    assert said[0] is None and said[2] is None  # half is not most; then every 2nd one
    assert said[1] == (
        f"90% of the completions of the rollout ending at optimizer step 8 repeat their prompt (runs of "
        f"{REPEAT_RUN}+ of its tokens make up {REPEAT_SHARE:.0%}+ of theirs; most did, in 1 rollout(s): steps 8); a reward that rises now may pay "
        "for the question restated rather than for an answer. Check that the reward scores the final answer "
        "only (reward=math does) and ask the prompt for just the answer; for example "
        "'What is 59 + 63? Reply with just the number. What is 59 + 63…', '59 + 63 = 59', 'x'"
    )
    assert "in 3 rollout(s): steps 8, 12, 16)" in said[3]
    assert len(caplog.records) == 2
    # The truncation warning quotes its cut-off completions the same way; the two are counted apart.
    message = watch.observe(0.75, 20, ["aaaa", "bbbb", "cccc", "dddd"])
    assert message.endswith("shorter answer; for example 'aaaa', 'bbbb', 'cccc'")
    assert "in 1 rollout(s): steps 20)" in message
