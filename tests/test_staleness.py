"""`rollout.staleness=k` (training/staleness.py): a rollout is drawn from the weights of k optimizer steps ago,
its recomputed old log-probs are that lagged policy's (and ReMax's greedy baseline is drawn from it), the current weights come back bit for bit, k = 0
keeps nothing, and the ring of lagged weights survives a resume (a changed k is refused)."""

from __future__ import annotations

import copy
import signal

import module_helpers
import pytest
import torch
from resume_helpers import csv_rows, fit_resumable, signal_at_loss_call, weights

from diagnose.gradients import Stepping
from twinkle_exp.config.schema import Config
from twinkle_exp.errors import UserError
from twinkle_exp.lifecycle import resume
from twinkle_exp.lifecycle.checkpoints import last_checkpoint
from twinkle_exp.loss import GRPOLoss
from twinkle_exp.models.hf import set_update_mode
from twinkle_exp.models.lora import trainable_parameters
from twinkle_exp.policy.logprobs import sequence_logps
from twinkle_exp.sampling.generate import generate
from twinkle_exp.tasks.prompt_stream import PromptStream
from twinkle_exp.training import rl_step
from twinkle_exp.training.greedy_baseline import greedy_rewards
from twinkle_exp.training.optimizer import optimizer_and_schedule
from twinkle_exp.training.staleness import CHECKPOINT_KEY, LaggedPolicy
from twinkle_exp.training.step_parts import sampling_options

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def _copy_of(module):
    return {k: v.detach().clone() for k, v in module.policy.state_dict().items()}


def _model_holding(module, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    model = copy.deepcopy(module.policy)
    model.load_state_dict(state)
    return model


def _logps(model, rollout) -> torch.Tensor:  # [N, P + C] the rollout's labels under `model`, one full pass
    set_update_mode(model, dropout=False)
    b = rollout
    with torch.no_grad():
        out, _ = sequence_logps(
            model, b.input_ids, b.attention_mask, b.position_ids, b.labels, temperature=b.temperature
        )
    return out


def _by_hand(staleness: int, rollouts: int):
    """`rollouts` rollouts of one optimizer step each (mu = 1, one minibatch), the stages called as
    PolicyModule's hooks do; yields, per rollout, the weights before it, its plan, the sampler's state
    before it, the lag it was drawn with and the module."""
    module = module_helpers.make_module(
        GRPOLoss(), rollout={"staleness": staleness}, mu=1, num_minibatches=1, old_logps="recompute"
    )
    parts, state, o = module.parts, module.state, module.optim_cfg
    parts.recompute_old_logps = True
    state.start(torch.device("cpu"), module.seed, rank=0)
    optimizer, schedule = optimizer_and_schedule(trainable_parameters(module.policy), o)
    stepping = Stepping(module, optimizer)
    stepper = rl_step.Stepper(
        stepping, schedule, torch.Tensor.backward, lambda: stepping.checked, lambda: stepping.steps
    )
    stream = iter(PromptStream(module.task, module.rollout_cfg.prompts_per_step, seed=0))

    def draw(prompts):
        return rl_step.sample(parts, prompts, state.generators.sampler)

    for _ in range(rollouts):
        before, sampler_state = _copy_of(module), state.generators.sampler.get_state()
        plan = rl_step.new_rollout(parts, next(stream), stepping.steps, draw, state.generators.shuffler)
        yield before, plan, sampler_state, parts.lagged.lag(stepping.steps), module
        set_update_mode(module.policy, dropout=False)
        rl_step.optimizer_step(parts, plan, stepper, state.nonfinite)


def test_a_rollout_is_drawn_from_the_weights_of_k_steps_ago_and_its_old_logps_are_theirs():
    seen = list(_by_hand(staleness=1, rollouts=3))
    w = [before for before, *_ in seen]  # w[t]: the weights after t optimizer steps
    for t in (1, 2):  # rollout t (after t steps) comes from w[t - 1]
        _, plan, sampler_state, lag, module = seen[t]
        lagged, current = _model_holding(module, w[t - 1]), _model_holding(module, w[t])
        assert lag == 1
        # The same draw from a separate model holding the lagged weights gives the same tokens.
        generator = torch.Generator()
        generator.set_state(sampler_state)
        prompts = plan.prompts
        again = generate(
            lagged, module.tokenizer, prompts, sampling_options(module.rollout_cfg), generator=generator
        )
        assert torch.equal(again.input_ids, plan.rollout.input_ids)
        mask = plan.rollout.completion_mask
        assert torch.allclose(again.old_logps[mask], plan.rollout.old_logps[mask], atol=1e-6, rtol=0)
        # The recomputed old log-probs are the lagged policy's, not the current one's.
        expected, now = _logps(lagged, plan.rollout), _logps(current, plan.rollout)
        assert (expected - now)[mask].abs().max() > 1e-4, "one step must move the log-probs for this test"
        assert torch.allclose(plan.old_logps[mask], expected[mask], atol=1e-6, rtol=0)
    # The sampler's own log-probs agree with the lagged recompute (both the behaviour policy's).
    _, plan, *_ = seen[2]
    mask = plan.rollout.completion_mask
    assert torch.allclose(plan.old_logps[mask], plan.rollout.old_logps[mask], atol=1e-5, rtol=0)


def test_remaxs_greedy_baseline_comes_from_the_lagged_policy_too():
    seen = _by_hand(staleness=1, rollouts=2)
    w0, *_ = next(seen)
    w1, plan, _, lag, module = next(seen)
    assert lag == 1
    parts, decoded = module.parts, []
    copy_model = parts.sampler_copy

    def recording(model):  # the weights the greedy decode runs on
        decoded.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return copy_model(model)

    parts.sampler_copy = recording
    try:
        greedy_rewards(parts, plan.prompts, plan.answers)
    finally:
        parts.sampler_copy = copy_model
    [used] = decoded
    assert any(not torch.equal(w0[k], w1[k]) for k in w0), "one step must move the weights for this test"
    assert all(torch.equal(used[k], w0[k]) for k in w0)
    assert all(torch.equal(v, w1[k]) for k, v in _copy_of(module).items())  # and the current ones are back


def test_the_current_weights_are_back_after_the_lagged_rollout_bit_for_bit():
    module = module_helpers.make_module(GRPOLoss(), rollout={"staleness": 2})
    policy, lagged = module.policy, module.parts.lagged
    before = _copy_of(module)
    lagged.before_step(policy, steps_done=0)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(1.0)
    moved = _copy_of(module)
    with lagged.weights(policy) as behaviour:
        assert behaviour is policy
        assert all(torch.equal(policy.state_dict()[k], before[k]) for k in before)
    assert all(torch.equal(policy.state_dict()[k], moved[k]) for k in moved)


def test_the_lag_grows_to_k_and_then_stays_there():
    lags = [lag for *_, lag, _ in _by_hand(staleness=2, rollouts=5)]
    assert lags == [0, 1, 2, 2, 2]  # the first rollouts come from the initial weights


def test_staleness_zero_keeps_no_copy_and_samples_from_the_policy_itself():
    for *_, lag, module in _by_hand(staleness=0, rollouts=2):
        assert lag == 0
        assert not module.parts.lagged.ring
        with module.parts.lagged.weights(module.policy) as behaviour:
            assert behaviour is module.policy
    lagged = LaggedPolicy(0)
    lagged.before_step(module.policy, 3)
    assert not lagged.ring


def test_only_trainable_parameters_are_copied():
    module = module_helpers.make_module(GRPOLoss(), rollout={"staleness": 1})
    frozen = next(iter(module.policy.parameters()))
    frozen.requires_grad_(False)  # as LoRA's base weights are
    module.parts.lagged.before_step(module.policy, 0)
    names = set(module.parts.lagged.ring[0].weights)
    trainable = {n for n, p in module.policy.named_parameters() if p.requires_grad}
    assert names == trainable and len(names) == len(list(module.policy.parameters())) - 1


def test_bad_staleness_is_refused_by_name():
    with pytest.raises(ValueError, match="rollout.staleness"):
        LaggedPolicy(-1)
    with pytest.raises(ValueError, match="rollout.staleness"):
        module_helpers.make_module(GRPOLoss(), rollout={"staleness": -1})


def test_staleness_with_fsdp_is_refused():
    problems = Config.relations(
        {
            "rollout": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 8, "staleness": 1},
            "optim": {"num_minibatches": 2},
            "trainer": {"strategy": "fsdp2"},
            "reward": {"overlong_buffer": 0},
        }
    )
    assert len(problems) == 1 and "rollout.staleness=1 with trainer=fsdp" in problems[0]


# --- resume -------------------------------------------------------------------------------------------------
STEPS = 16  # 4 rollouts of mu=2 x num_minibatches=2 optimizer steps


def _stale_module(staleness: int = 3):
    return module_helpers.make_module(GRPOLoss(beta=0.1), rollout={"staleness": staleness})


@pytest.mark.slow
def test_a_stale_run_stopped_mid_rollout_resumes_to_the_same_metrics_and_weights(tmp_path):
    whole = _stale_module()
    fit_resumable(whole, tmp_path / "whole", STEPS)
    first = _stale_module()
    signal_at_loss_call(first, call=6, signum=signal.SIGTERM)  # during step 6: the ring holds steps 3-5
    fit_resumable(first, tmp_path / "split", STEPS)
    saved = torch.load(last_checkpoint(tmp_path / "split"), weights_only=False)[CHECKPOINT_KEY]
    assert saved["staleness"] == 3 and [s["step"] for s in saved["ring"]] == [3, 4, 5]
    second = _stale_module()
    fit_resumable(second, tmp_path / "split", STEPS, resume=True)
    assert csv_rows(tmp_path / "split" / "metrics.csv") == csv_rows(tmp_path / "whole" / "metrics.csv")
    a, b = weights(whole), weights(second)
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run's"
    # And the lag mattered: the same run without staleness ends elsewhere.
    fresh = module_helpers.make_module(GRPOLoss(beta=0.1))
    fit_resumable(fresh, tmp_path / "fresh", STEPS)
    c = weights(fresh)
    assert any(not torch.equal(a[k], c[k]) for k in a)


def test_a_checkpoint_of_another_staleness_is_refused():
    ring = LaggedPolicy(2)
    with pytest.raises(ValueError, match="rollout.staleness=0 and this run has rollout.staleness=2"):
        ring.load_state_dict(None)
    with pytest.raises(ValueError, match="rollout.staleness=1 and this run has rollout.staleness=2"):
        ring.load_state_dict(LaggedPolicy(1).state_dict())
    LaggedPolicy(0).load_state_dict(None)  # a checkpoint without a ring resumes at k = 0


def test_resume_refuses_a_changed_staleness_and_reads_a_missing_one_as_zero(tmp_path):
    config = {"loss": {"beta": 0.0}, "task": {}, "policy": {}, "seed": 0, "rollout": {"group_size": 8}}
    start = resume.Start(checkpoint=tmp_path / "last.ckpt", run_info={"config": config})
    resume.check_resume_config(start, config | {"rollout": {"group_size": 8, "staleness": 0}})
    with pytest.raises(UserError, match="rollout.staleness=0 and this run has rollout.staleness=1"):
        resume.check_resume_config(start, config | {"rollout": {"group_size": 8, "staleness": 1}})
