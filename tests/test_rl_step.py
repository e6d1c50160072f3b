"""The RL step's stages (training/rl_step.py) called by hand, the training state's checkpoint layout, and the
run's end (lifecycle/run_end.py)."""

from __future__ import annotations

import dataclasses
import os
import signal

import module_helpers
import pytest
import torch
from resume_helpers import fit_resumable

from diagnose.gradients import Stepping
from twinkle_exp.lifecycle import signals
from twinkle_exp.lifecycle.checkpoints import last_checkpoint
from twinkle_exp.lifecycle.run_end import RunEnd
from twinkle_exp.loss import GRPOLoss
from twinkle_exp.models.hf import set_update_mode
from twinkle_exp.models.lora import trainable_parameters
from twinkle_exp.tasks.prompt_stream import PromptStream
from twinkle_exp.training import rl_step
from twinkle_exp.training.old_logps import recompute_for_run
from twinkle_exp.training.optimizer import optimizer_and_schedule
from twinkle_exp.training.state import KEY

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def _by_hand(module, steps: int) -> list[dict[str, float]]:
    """`steps` optimizer steps of the first rollout, calling the stages as PolicyModule's hooks do."""
    parts, state, o = module.parts, module.state, module.optim_cfg
    parts.recompute_old_logps = recompute_for_run(
        o.old_logps, "32-true", module.policy, o.rollout_correction.mode, None, o.update_dropout
    )
    state.start(torch.device("cpu"), module.seed, rank=0)
    optimizer, schedule = optimizer_and_schedule(trainable_parameters(module.policy), o)
    stepping = Stepping(module, optimizer)
    stepper = rl_step.Stepper(
        stepping, schedule, torch.Tensor.backward, lambda: stepping.checked, lambda: stepping.steps
    )
    batch = next(iter(PromptStream(module.task, module.rollout_cfg.prompts_per_step, seed=0)))

    def draw(prompts):
        return rl_step.sample(parts, prompts, state.generators.sampler)

    plan = rl_step.new_rollout(parts, batch, 0, draw, state.generators.shuffler)
    set_update_mode(module.policy, dropout=o.update_dropout)
    return [rl_step.optimizer_step(parts, plan, stepper, state.nonfinite)[0] for _ in range(steps)]


def test_the_stages_by_hand_give_the_weights_of_a_fit_bit_for_bit(tmp_path):
    fitted = module_helpers.make_module(GRPOLoss(beta=0.1))
    module_helpers.fit(fitted, tmp_path, max_steps=2)
    by_hand = module_helpers.make_module(GRPOLoss(beta=0.1))
    metrics = _by_hand(by_hand, steps=2)
    assert len(metrics) == 2 and metrics[1]["train/skipped_steps"] == 0.0
    a, b = fitted.policy.state_dict(), by_hand.policy.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_rollout_carries_how_it_was_sampled():
    module = module_helpers.make_module(GRPOLoss())
    module.rollout_cfg = dataclasses.replace(module.rollout_cfg, temperature=0.7, top_k=5, top_p=0.9)
    module.state.start(torch.device("cpu"), 0, rank=0)
    rollout = rl_step.sample(module.parts, ["1+2=", "3+4="], module.generators.sampler)
    assert (rollout.temperature, rollout.top_k, rollout.top_p) == (0.7, 5, 0.9)


# The checkpoint entry's layout since pending rollouts were checkpointed: what older checkpoints hold.
OLD_LAYOUT = {"rollouts_done", "first_val", "last_val", "nonfinite", "per_rank"}
OLD_PER_RANK = {"sampler", "shuffler", "global_rng", "pending"}


def test_a_state_of_the_old_layout_loads(tmp_path):
    first = module_helpers.make_module(GRPOLoss())
    fit_resumable(first, tmp_path, max_steps=2)  # half a rollout: the checkpoint holds a pending plan
    saved = torch.load(last_checkpoint(tmp_path), weights_only=False)[KEY]
    assert set(saved) == OLD_LAYOUT and set(saved["per_rank"][0]) == OLD_PER_RANK
    own = saved["per_rank"][0]
    for key in ("temperature", "top_k", "top_p"):  # rollouts were saved without how they were sampled
        del own["pending"]["rollout"][key]
    second = module_helpers.make_module(GRPOLoss())
    sampled_with = {"temperature": 0.5, "top_k": 3, "top_p": 0.8}
    second.state.load_state_dict(saved, rank=0, world_size=1, sampled_with=sampled_with)
    plan = second.pending
    assert second.rollouts_done == 0 and second.validation.first == first.validation.first
    assert plan.next_step == 2 and len(plan.steps) == 4 and plan.prompts == own["pending"]["prompts"]
    assert torch.equal(plan.old_logps, own["pending"]["old_logps"])
    assert (plan.rollout.temperature, plan.rollout.top_k, plan.rollout.top_p) == (0.5, 3, 0.8)
    assert torch.equal(second.state.restored["sampler"], own["sampler"])


def test_the_run_ends_at_its_budget_or_for_the_first_reason_given():
    end = RunEnd(max_steps=4)
    assert not end.done(3) and end.done(4) and end.done(5)
    assert not end.signalled() and not end.vote() and end.reason is None
    end.stop("stopped at optimizer step 2: non-finite")
    end.stop("a later reason")
    assert end.reason == "stopped at optimizer step 2: non-finite" and end.signal is None
    assert end.vote()  # a single process: its own reason
    assert RunEnd(max_steps=0).done(0)


def test_a_signal_is_honoured_by_the_run_end():
    end = RunEnd(max_steps=10)
    signals.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert end.signalled() and end.vote()
    finally:
        signals.restore()
    assert (end.reason, end.signal) == ("SIGUSR1 received", signal.SIGUSR1)
