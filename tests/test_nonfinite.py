"""Non-finite values: a step with a NaN/inf reward, advantage, log-prob, loss or gradient is skipped (weights
and optimizer state untouched), counted in train/skipped_steps, and a streak of them stops the run with a
checkpoint and a message naming the step and the first non-finite quantity."""

from __future__ import annotations

import math

import module_helpers
import pytest
import torch
from resume_helpers import csv_rows, fit_resumable, weights

from twinkle_exp import metric_names as M
from twinkle_exp.lifecycle.checkpoints import last_checkpoint
from twinkle_exp.lifecycle.nonfinite import QUANTITIES, NonFiniteGuard
from twinkle_exp.loss import GRPOLoss, LossOutput
from twinkle_exp.rewards import RewardFunction, RewardSet

NAN = float("nan")


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def test_the_guard_names_the_first_quantity_in_the_order_a_step_computes_them():
    guard = NonFiniteGuard(max_consecutive=2)
    guard.watch("gradient", torch.tensor(NAN))
    guard.watch("loss", torch.tensor([1.0, math.inf]))
    guard.watch("log-prob", torch.zeros(3, 4))
    assert guard.first_non_finite() == "loss"  # the loss came before the gradient it caused
    assert guard.first_non_finite() is None  # the checks were cleared
    guard.watch("reward", True)
    assert guard.first_non_finite() == "reward"
    assert QUANTITIES == ("reward", "advantage", "log-prob", "loss", "gradient")
    with pytest.raises(ValueError, match="unknown quantity 'weights'"):
        guard.watch("weights", torch.zeros(1))
    with pytest.raises(ValueError, match="optim.max_skipped_steps must be >= 1, got 0"):
        NonFiniteGuard(0)


def test_the_guard_counts_streaks_and_a_good_step_ends_one():
    guard = NonFiniteGuard(max_consecutive=2)
    assert not guard.record(3, "loss")
    assert not guard.record(4, None)  # a good step: the streak is over
    assert not guard.record(5, "gradient")
    assert guard.record(6, "loss")  # the second in a row: stop
    assert guard.skipped == 3 and guard.first == (5, "gradient")
    message = guard.stop_message(6)
    assert "stopped at optimizer step 6" in message and "the first was the gradient at step 5" in message
    assert "optim.max_skipped_steps=2" in message
    restored = NonFiniteGuard(2)
    restored.load_state_dict(guard.state_dict())
    assert restored.state_dict() == guard.state_dict()


# --- in a training run: four ways to get a non-finite step ---------------------------------------------
def _nan_reward(module):
    module.rewards = RewardSet([RewardFunction("broken", lambda p, c, a: [NAN] * len(c))])


def _nan_logits_in_the_update(module):
    # Only the update's forward has grad enabled: sampling, old and reference log-probs stay finite. The
    # final norm's output feeds both the logits and the hidden-state log-probs, so either path breaks.
    def hook(norm, args, output):
        return output * NAN if torch.is_grad_enabled() else None

    module.policy.norm.register_forward_hook(hook)


class _NaNLoss:
    """The module's loss times NaN on the calls `broken` picks (all: None), with what the `LossFn`
    protocol declares (beta, needs_entropy, entropy_grad, zero_advantage_inert) and the rest of the wrapped loss's attributes."""

    def __init__(self, inner, broken: set[int] | None = None) -> None:
        self.inner, self.broken, self.calls = inner, broken, 0
        self.beta, self.needs_entropy, self.entropy_grad = inner.beta, inner.needs_entropy, inner.entropy_grad
        self.zero_advantage_inert = inner.zero_advantage_inert

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def __call__(self, **kw) -> LossOutput:
        self.calls += 1
        out = self.inner(**kw)
        if self.broken is None or self.calls in self.broken:
            return LossOutput(out.loss * NAN, out.metrics)
        return out


def _nan_loss(module):
    module.loss_fn = _NaNLoss(module.loss_fn)


def _nan_gradient(module):
    next(module.policy.parameters()).register_hook(lambda grad: grad * NAN)


BREAKERS = {"reward": _nan_reward, "log-prob": _nan_logits_in_the_update, "loss": _nan_loss}
BREAKERS["gradient"] = _nan_gradient


@pytest.mark.slow
@pytest.mark.parametrize("quantity", sorted(BREAKERS))
def test_a_streak_of_non_finite_steps_stops_with_a_checkpoint_naming_the_cause(tmp_path, quantity):
    module = module_helpers.make_module(GRPOLoss(beta=0.1), max_skipped_steps=3)
    BREAKERS[quantity](module)
    before = weights(module)
    trainer = fit_resumable(module, tmp_path, max_steps=16)
    assert trainer.global_step == 3, "stopped after the third skipped step"
    assert module.stop_reason == (
        "stopped at optimizer step 3: 3 consecutive optimizer steps skipped for non-finite values "
        f"(optim.max_skipped_steps=3); the first was the {quantity} at step 1"
    )
    after = weights(module)
    assert all(torch.equal(before[k], after[k]) for k in before), "a skipped step changed the weights"
    assert not trainer.optimizers[0].state, "a skipped step changed the optimizer's state"
    rows = [r for r in csv_rows(tmp_path / "metrics.csv") if M.SKIPPED_STEPS in r]
    assert [float(r[M.SKIPPED_STEPS]) for r in rows] == [1.0, 2.0, 3.0]
    saved = torch.load(last_checkpoint(tmp_path), weights_only=False)
    assert saved["global_step"] == 3 and saved["twinkle_module"]["nonfinite"]["first"] == (1, quantity)


@pytest.mark.slow
def test_one_non_finite_step_is_skipped_and_training_goes_on(tmp_path):
    module = module_helpers.make_module(GRPOLoss(beta=0.1), max_skipped_steps=3)
    module.loss_fn = _NaNLoss(module.loss_fn, broken={2})
    trainer = fit_resumable(module, tmp_path, max_steps=8)
    assert trainer.global_step == 8 and module.stop_reason is None
    rows = [r for r in csv_rows(tmp_path / "metrics.csv") if M.SKIPPED_STEPS in r]
    assert [float(r[M.SKIPPED_STEPS]) for r in rows] == [0, 1, 1, 1, 1, 1, 1, 1]
    assert math.isnan(float(rows[1][M.LOSS])) and math.isfinite(float(rows[2][M.LOSS]))
    # AdamW counts the steps it applied to each parameter: 7 of the 8.
    [step] = {float(s["step"]) for s in trainer.optimizers[0].state.values()}
    assert step == 7
