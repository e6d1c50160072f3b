"""Exact resume in-process: a run stopped by a signal in the middle of a rollout and resumed gives the
uninterrupted run's metrics and weights, bit for bit on CPU; the checkpoint holds every state needed."""

from __future__ import annotations

import signal

import module_helpers
import pytest
import torch
from resume_helpers import csv_rows, fit_resumable, signal_at_loss_call, weights

from twinkle_exp import metric_names as M
from twinkle_exp.lifecycle.checkpoints import last_checkpoint
from twinkle_exp.loss import GRPOLoss
from twinkle_exp.tasks import AdditionTask
from twinkle_exp.tasks.prompt_stream import PromptStream
from twinkle_exp.training.update_plan import UpdatePlan, shuffled_steps

STEPS = 16  # 4 rollouts of mu=2 x num_minibatches=2 optimizer steps


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def _module(dropout: float = 0.0):
    # beta > 0: the frozen reference takes part; dropout in the update draws from torch's global generator.
    return module_helpers.make_module(GRPOLoss(beta=0.1), dropout=dropout, update_dropout=dropout > 0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, dropout", [(signal.SIGTERM, 0.0), (signal.SIGINT, 0.1), (signal.SIGUSR1, 0.0)]
)
def test_a_run_stopped_mid_rollout_resumes_to_the_same_metrics_and_weights(tmp_path, dropout, signum):
    whole = _module(dropout)
    fit_resumable(whole, tmp_path / "whole", STEPS)

    first = _module(dropout)
    signal_at_loss_call(first, call=6, signum=signum)  # during optimizer step 6: 2 steps into rollout 2
    trainer = fit_resumable(first, tmp_path / "split", STEPS)
    assert trainer.global_step == 6, "the signal's optimizer step was finished, and no later one ran"
    assert first.stop_reason == f"{signal.Signals(signum).name} received"
    assert first.pending is not None and first.pending.next_step == 2  # the rest of rollout 2 is pending
    saved = torch.load(last_checkpoint(tmp_path / "split"), weights_only=False)
    assert saved["global_step"] == 6 and saved["twinkle_module"]["rollouts_done"] == 1

    second = _module(dropout)
    fit_resumable(second, tmp_path / "split", STEPS, resume=True)
    assert second.trainer.global_step == STEPS and second.rollouts_done == STEPS // 4
    expected, got = csv_rows(tmp_path / "whole" / "metrics.csv"), csv_rows(tmp_path / "split" / "metrics.csv")
    assert [r["step"] for r in got] == [r["step"] for r in expected]  # nothing lost, nothing twice
    assert got == expected
    assert sum(M.REWARD_MEAN in r for r in got) == STEPS // 4  # one row per rollout, the resumed one too
    a, b = weights(whole), weights(second)
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run's"


@pytest.mark.slow
def test_a_run_extended_past_a_rollout_that_max_steps_cut_short_finishes_that_rollout(tmp_path):
    whole = _module()
    fit_resumable(whole, tmp_path / "whole", STEPS)
    first = _module()
    fit_resumable(first, tmp_path / "split", 6)  # max_steps=6 cuts rollout 2 after 2 of its 4 steps
    assert first.rollouts_done == 2 and first.pending is None  # this run logged the cut rollout
    saved = torch.load(last_checkpoint(tmp_path / "split"), weights_only=False)
    assert saved["twinkle_module"]["rollouts_done"] == 1  # the checkpoint kept it pending
    second = _module()
    fit_resumable(second, tmp_path / "split", STEPS, resume=True)
    assert csv_rows(tmp_path / "split" / "metrics.csv") == csv_rows(tmp_path / "whole" / "metrics.csv")
    a, b = weights(whole), weights(second)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_the_checkpoint_holds_every_state_a_resume_needs(tmp_path):
    module = _module()
    signal_at_loss_call(module, call=3)
    fit_resumable(module, tmp_path, STEPS)
    saved = torch.load(last_checkpoint(tmp_path), weights_only=False)
    assert saved["global_step"] == 3
    assert saved["optimizer_states"][0]["state"], "the optimizer's moments"
    assert saved["lr_schedulers"][0]["last_epoch"] == 3
    state = saved["twinkle_module"]
    assert state["rollouts_done"] == 0 and state["first_val"] == module.validation.first
    assert state["nonfinite"] == {"skipped": 0, "consecutive": 0, "first": None}
    [own] = state["per_rank"]
    assert set(own["global_rng"]) >= {"torch", "python", "numpy"}
    assert torch.equal(own["sampler"], module.generators.sampler.get_state())
    assert torch.equal(own["shuffler"], module.generators.shuffler.get_state())
    plan = UpdatePlan.from_state_dict(own["pending"])
    assert plan.next_step == 3 and len(plan.steps) == 4
    assert plan.prompts == module.pending.prompts
    assert torch.equal(plan.old_logps, module.pending.old_logps.cpu())
    assert not any(k.startswith("_reference") or "reference" in k for k in saved["state_dict"])
    assert saved["twinkle_run"]["csv_rows"] == len(csv_rows(tmp_path / "metrics.csv"))


def test_the_prompt_stream_started_at_a_rollout_replays_the_same_prompts():
    task = AdditionTask(min_digits=1, max_digits=3, num_validation=4)
    whole = iter(PromptStream(task, 4, seed=3))
    expected = [next(whole) for _ in range(7)]
    later = iter(PromptStream(task, 4, seed=3, start=5))
    assert [next(later), next(later)] == expected[5:7]
    with pytest.raises(ValueError, match="start rollout must be >= 0"):
        PromptStream(task, 4, seed=3, start=-1)


def test_each_epoch_of_a_plan_covers_every_row_once_in_near_equal_minibatches():
    steps = shuffled_steps(16, epochs=2, num_minibatches=3, generator=torch.Generator().manual_seed(0))
    assert [len(rows) for rows in steps] == [6, 5, 5, 6, 5, 5]
    for epoch in (steps[:3], steps[3:]):
        assert sorted(torch.cat(epoch).tolist()) == list(range(16))
    again = shuffled_steps(16, epochs=2, num_minibatches=3, generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(steps, again, strict=True))


def test_a_plan_split_by_groups_keeps_each_group_in_one_minibatch():
    """optim.minibatch_split=groups: 6 groups of 4 rows in 3 minibatches of 2 whole groups, every epoch."""
    steps = shuffled_steps(24, 2, 3, torch.Generator().manual_seed(0), group_size=4)
    assert [len(rows) for rows in steps] == [8] * 6
    for epoch in (steps[:3], steps[3:]):
        assert sorted(torch.cat(epoch).tolist()) == list(range(24))
        for rows in epoch:
            groups = rows // 4
            assert len(set(groups.tolist())) == 2 and sorted(rows.tolist()) == sorted(
                g * 4 + m for g in set(groups.tolist()) for m in range(4)
            )
    assert not all(torch.equal(a, b) for a, b in zip(steps[:3], steps[3:], strict=True))  # reshuffled
    with pytest.raises(ValueError, match="cannot be split into 7 minibatches of whole groups"):
        shuffled_steps(24, 1, 7, torch.Generator(), group_size=4)
