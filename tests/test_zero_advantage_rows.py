"""optim.skip_zero_advantage: rows whose advantage is exactly 0 leave the update, and the weights stay those of
the full update; `zero_advantage_inert` is checked against each loss's own gradients; the update's passes stop
at a micro-batch's last labelled column (`UpdatePlan.label_ends`) with the same result."""

from __future__ import annotations

import module_helpers
import pytest
import torch
from test_rl_step import _by_hand

from twinkle_exp import metric_names as M
from twinkle_exp.config.schema import skip_zero_advantage_problem
from twinkle_exp.loss import GRPOLoss
from twinkle_exp.loss.registry import losses
from twinkle_exp.rewards import RewardFunction, RewardSet

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py

# The registered losses that read other rows beyond the step's totals, or add a term that is not a multiple
# of the advantage: each names why, and none may claim `advantage_linear`.
NOT_LINEAR = {
    "bapo": "clip bounds searched on each call's tokens",
    "clip_cov": "covariance selection per call",
    "kl_cov": "covariance selection per call",
    "m2po": "second-moment mask per call",
    "kimi": "a squared log-ratio penalty outside the advantage",
    "gvpo": "a squared residual: a row of advantage 0 still pulls its log-ratio to its group's",
}


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    b, t = 8, 9
    labels = torch.randint(0, 50, (b, t), generator=g)
    labels[:, :3] = -100
    labels[1, 7:] = -100
    logps = torch.randn(b, t, generator=g, dtype=torch.float64) * 0.3 - 1
    old = logps + 0.2 * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.tensor([0.0, 0.0, 1.0, -1.0, 0.0, 0.5, 0.0, -0.7], dtype=torch.float64)
    return labels, logps, old, adv


def _gradient(loss, labels, logps, old, adv, totals):
    x = logps.clone().requires_grad_()
    loss(logps=x, labels=labels, advantages=adv, old_logps=old, ref_logps=old, **totals).loss.backward()
    return x.grad


@pytest.mark.parametrize("name", sorted(losses()))
def test_a_linear_loss_gets_the_same_gradient_without_its_zero_advantage_rows(name):
    cls = losses()[name]
    assert cls.advantage_linear == (name not in NOT_LINEAR), NOT_LINEAR.get(name, "should declare it")
    if not cls.advantage_linear:
        assert not cls().zero_advantage_inert
        return
    loss = cls()
    assert loss.zero_advantage_inert
    for seed in range(3):
        labels, logps, old, adv = _batch(seed)
        totals = {"num_sequences": len(adv), "num_tokens": int((labels != -100).sum())}
        whole = _gradient(loss, labels, logps, old, adv, totals)
        keep = adv != 0
        part = _gradient(loss, labels[keep], logps[keep], old[keep], adv[keep], totals)
        assert torch.equal(whole[~keep], torch.zeros_like(whole[~keep]))
        torch.testing.assert_close(part, whole[keep], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(
    "params", [{"beta": 0.01}, {"entropy_coef": 0.01}, {"top_entropy_quantile": 0.5}], ids=str
)
def test_a_term_outside_the_advantage_makes_a_loss_not_inert(params):
    assert GRPOLoss().zero_advantage_inert and not GRPOLoss(**params).zero_advantage_inert
    problem = skip_zero_advantage_problem(True, GRPOLoss(**params), "grpo")
    assert problem is not None and "optim.skip_zero_advantage=true with GRPOLoss" in problem
    assert skip_zero_advantage_problem(False, GRPOLoss(**params), "grpo") is None


def _odd_answers_only(prompts, completions, answers):
    """The digit share for an odd gold answer, 0.5 for an even one: an even answer's group has advantage 0."""
    return [
        sum(ch.isdigit() for ch in c) / max(len(c), 1) if int(a) % 2 else 0.5
        for c, a in zip(completions, answers, strict=True)
    ]


def _module(**optim):
    module = module_helpers.make_module(GRPOLoss(), rollout={"prompts_per_step": 8}, **optim)
    module.parts.rewards = RewardSet([RewardFunction("odd", _odd_answers_only)], truncated_max=None)
    return module


def test_skipping_zero_advantage_rows_keeps_the_weights_of_the_full_update():
    full, skipping = _module(), _module(skip_zero_advantage=True)
    full_metrics, skip_metrics = _by_hand(full, steps=4), _by_hand(skipping, steps=4)
    skipped = [m[M.ZERO_ADVANTAGE_ROWS_SKIPPED] for m in skip_metrics]
    assert any(s > 0 for s in skipped) and all(0 <= s < 1 for s in skipped), skipped
    assert M.ZERO_ADVANTAGE_ROWS_SKIPPED not in full_metrics[0]
    for a, b in zip(full_metrics, skip_metrics, strict=True):
        assert a[M.LOSS] == pytest.approx(b[M.LOSS], abs=1e-6)
        assert a[M.GRAD_NORM] == pytest.approx(b[M.GRAD_NORM], rel=1e-4)
    a, b = full.policy.state_dict(), skipping.policy.state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-6)


def test_a_step_with_every_row_skipped_still_steps_the_optimizer_on_zero_gradients():
    module = _module(skip_zero_advantage=True, mu=1, num_minibatches=8, minibatch_split="groups")
    before = {k: v.clone() for k, v in module.policy.state_dict().items()}
    metrics = _by_hand(module, steps=8)
    all_skipped = [m for m in metrics if m[M.ZERO_ADVANTAGE_ROWS_SKIPPED] == 1.0]
    assert all_skipped and all(m[M.GRAD_NORM] == 0.0 for m in all_skipped)
    after = module.policy.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_skipping_refuses_a_loss_with_a_kl_term():
    with pytest.raises(ValueError, match="optim.skip_zero_advantage=true with GRPOLoss"):
        module_helpers.make_module(GRPOLoss(beta=0.1), skip_zero_advantage=True)


def test_a_pass_stopped_at_the_rows_last_label_gives_the_full_width_log_probs(monkeypatch):
    from twinkle_exp.policy.logprobs import sequence_logps
    from twinkle_exp.training import rl_step, update_step

    module, plans = _module(), []

    def capture(policy, loss_fn, plan, *args, **kwargs):
        plans.append(plan)
        return update_step.accumulate_gradients(policy, loss_fn, plan, *args, **kwargs)

    monkeypatch.setattr(rl_step, "accumulate_gradients", capture)
    _by_hand(module, steps=1)
    plan, policy = plans[0], module.parts.policy
    ends = plan.label_ends
    b = plan.rollout
    short = (ends < b.input_ids.shape[1]).nonzero().flatten()  # rows that ended early: a narrower pass
    assert len(short) > 0
    prefix = plan.prefixes.for_rows(short, "cpu")
    widths = []

    def recorded(model, input_ids, *args, **kwargs):
        widths.append(input_ids.shape[1])
        return sequence_logps(model, input_ids, *args, **kwargs)

    monkeypatch.setattr(update_step, "sequence_logps", recorded)
    with torch.no_grad():
        trimmed, _ = update_step._trimmed_logps(policy, module.parts.loss_fn, plan, short, prefix, 1.0)
    assert widths == [int(ends[short].max())]
    with torch.no_grad():
        full, _ = sequence_logps(
            policy, b.input_ids[short], b.attention_mask[short], b.position_ids[short], b.labels[short],
            prefix=prefix,
        )  # fmt: skip
    assert trimmed.shape == full.shape
    torch.testing.assert_close(trimmed, full, rtol=1e-5, atol=1e-6)
