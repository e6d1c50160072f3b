"""The RL step's extra sampling and per-token advantages, called by hand on a tiny policy: ReMax's greedy
baseline (drawn only for `advantage=remax`, scored, not trained on, counted), the entropy-shaped advantage
reaching the loss per token, and dynamic sampling's refills (`rollout.filter_zero_variance`)."""

from __future__ import annotations

import dataclasses

import module_helpers
import pytest
import torch

from twinkle_exp import metric_names as M
from twinkle_exp.config.schema import AdvantageConfig
from twinkle_exp.loss import GRPOLoss
from twinkle_exp.models.hf import set_update_mode
from twinkle_exp.models.lora import trainable_parameters
from twinkle_exp.rewards import RewardFunction, RewardSet
from twinkle_exp.sampling.generate import SamplingOptions, generate
from twinkle_exp.tasks.prompt_stream import FreshPrompts, PromptStream
from twinkle_exp.training import rl_step
from twinkle_exp.training.optimizer import optimizer_and_schedule

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def _module(advantage: AdvantageConfig, rewards: RewardSet | None = None, **rollout):
    module = module_helpers.make_module(GRPOLoss())
    module.parts.advantage = advantage
    if rewards is not None:
        module.parts.rewards = rewards
    module.rollout_cfg = dataclasses.replace(module.rollout_cfg, **rollout)
    module.state.start(torch.device("cpu"), module.seed, rank=0)
    return module


def _rollout(module, fresh=None):
    parts, state = module.parts, module.state
    batch = next(iter(PromptStream(module.task, module.rollout_cfg.prompts_per_step, seed=0)))
    draw = lambda prompts: rl_step.sample(parts, prompts, state.generators.sampler)  # noqa: E731
    return batch, rl_step.new_rollout(parts, batch, 0, draw, state.generators.shuffler, fresh)


def _stepper(module):
    optimizer, schedule = optimizer_and_schedule(trainable_parameters(module.policy), module.optim_cfg)
    steps = [0]

    class Stepping:
        param_groups = optimizer.param_groups

        def zero_grad(self, set_to_none=True):
            optimizer.zero_grad(set_to_none=set_to_none)

        def step(self):
            optimizer.step()
            steps[0] += 1

    norm = rl_step.GradientCheck(torch.tensor(0.0), None)
    return rl_step.Stepper(Stepping(), schedule, torch.Tensor.backward, lambda: norm, lambda: steps[0])


def test_remax_draws_one_greedy_completion_per_prompt_and_subtracts_its_reward():
    module = _module(AdvantageConfig(estimator="remax"))
    batch, plan = _rollout(module)
    parts = module.parts
    greedy = generate(parts.policy, parts.tokenizer, batch["prompts"], SamplingOptions(8, greedy=True))
    baseline, _ = parts.rewards(
        batch["prompts"], greedy.completions, batch["answers"], greedy.truncated, greedy.completion_lengths
    )
    want = plan.rewards - baseline.repeat_interleave(module.rollout_cfg.group_size)
    assert plan.adv.advantages.tolist() == pytest.approx(want.tolist(), abs=1e-6)
    assert plan.sampling_metrics == {M.GREEDY_BASELINE_SAMPLES: 4.0}
    assert plan.seconds[M.TIME_GREEDY_BASELINE] > 0
    assert plan.rollout.input_ids.shape[0] == 16  # the greedy rows are not in the trained rollout
    summary = rl_step.rollout_summary(parts, plan, 0, quote=False)
    assert summary[M.GREEDY_BASELINE_SAMPLES] == 4.0 and M.TIME_GREEDY_BASELINE in summary


def test_the_greedy_baseline_leaves_the_sampled_rollout_alone():
    _, with_remax = _rollout(_module(AdvantageConfig(estimator="remax")))
    _, without = _rollout(_module(AdvantageConfig()))
    assert torch.equal(with_remax.rollout.input_ids, without.rollout.input_ids)
    assert without.sampling_metrics == {} and M.TIME_GREEDY_BASELINE not in without.seconds


class _Capture:
    """GRPO, recording what the update passes it (entropies asked for, so the test sees them)."""

    def __init__(self) -> None:
        self.inner, self.calls = GRPOLoss(), []
        self.beta, self.needs_entropy, self.entropy_grad = 0.0, True, False
        self.zero_advantage_inert = False

    def __call__(self, **kwargs):
        self.calls.append({k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)})
        kwargs["entropies"] = None
        return self.inner(**kwargs)


@pytest.mark.parametrize(("alpha", "kappa"), [(0.4, 2.0), (5.0, 1.5)])
def test_the_entropy_shaped_advantage_reaches_the_loss_per_token(alpha, kappa):
    module = _module(AdvantageConfig(estimator="entropy_shaped", entropy_alpha=alpha, entropy_kappa=kappa))
    _, plan = _rollout(module)
    capture = _Capture()
    module.parts.loss_fn = capture
    set_update_mode(module.policy, dropout=False)
    rl_step.optimizer_step(module.parts, plan, _stepper(module), module.state.nonfinite)
    rows = plan.steps[0]
    (call,) = capture.calls  # one micro-batch
    adv, h, mask = call["advantages"], call["entropies"], plan.rollout.completion_mask[rows]
    a = plan.adv.advantages[rows].double()[:, None]
    want = (a + torch.minimum(alpha * h.double(), a.abs() / kappa)).masked_fill(~mask, 0.0)
    assert adv.shape == mask.shape
    assert torch.allclose(adv.double().masked_fill(~mask, 0.0), want, atol=1e-6)
    assert (adv.double() - a).masked_fill(~mask, 0.0).abs().max() > 0  # the term is there


def _constant_for_even_answers(prompts, completions, answers):
    """1.0 on every completion of a prompt whose answer is even (a zero-variance group), else its digit share."""
    return [
        1.0 if int(a) % 2 == 0 else module_helpers.digit_fraction([p], [c], [a])[0]
        for p, c, a in zip(prompts, completions, answers, strict=True)
    ]


def test_dynamic_sampling_replaces_the_zero_variance_groups_in_the_step():
    rewards = RewardSet([RewardFunction("even", _constant_for_even_answers)], truncated_max=None)
    module = _module(AdvantageConfig(), rewards, filter_zero_variance=True, max_extra_draws=8)
    fresh = FreshPrompts(module.task, seed=0, rank=0, rollout=0)
    batch, plan = _rollout(module, fresh)
    even = [int(a) % 2 == 0 for a in batch["answers"]]
    assert any(even), "the seed's first batch should hold an even answer"
    kept = [p for p, e in zip(batch["prompts"], even, strict=True) if not e]
    assert [p for p in plan.prompts if p in batch["prompts"]] == kept
    assert all(int(a) % 2 for a in plan.answers)  # every zero-variance group replaced
    assert plan.stream_prompts == batch["prompts"]
    plan.check_replayed(
        batch["prompts"]
    )  # a resumed run's stream gives the stream's prompts, not the refills
    assert plan.rollout.input_ids.shape[0] == 16 and plan.adv.num_zero_std_groups == 0
    m = plan.sampling_metrics
    assert m[M.DYNAMIC_DROPPED_FRACTION] == sum(even) / 4 and m[M.DYNAMIC_CAP_HIT] == 0.0
    set_update_mode(module.policy, dropout=False)
    metrics, _ = rl_step.optimizer_step(module.parts, plan, _stepper(module), module.state.nonfinite)
    assert torch.isfinite(torch.tensor(metrics[M.LOSS]))


def test_a_refilled_plan_survives_its_checkpoint():
    from twinkle_exp.training.update_plan import UpdatePlan

    rewards = RewardSet([RewardFunction("even", _constant_for_even_answers)], truncated_max=None)
    module = _module(AdvantageConfig(), rewards, filter_zero_variance=True, max_extra_draws=8)
    batch, plan = _rollout(module, FreshPrompts(module.task, seed=0, rank=0, rollout=0))
    back = UpdatePlan.from_state_dict(plan.state_dict())
    assert back.prompts == plan.prompts and back.stream_prompts == batch["prompts"] != plan.prompts
    assert back.sampling_metrics == plan.sampling_metrics and torch.equal(
        back.rollout.input_ids, plan.rollout.input_ids
    )
    back.check_replayed(batch["prompts"])
    with pytest.raises(RuntimeError, match="did not replay"):
        back.check_replayed(plan.prompts)
