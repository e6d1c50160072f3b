"""PolicyModule in-process: one rollout's updates move the policy, never the frozen reference."""

from __future__ import annotations

import math

import module_helpers
import pytest
import torch

from twinkle_exp import metric_names as M
from twinkle_exp.loss import GRPOLoss, SAPOLoss
from twinkle_exp.training.module import PolicyModule

MU, NUM_MINIBATCHES = 2, 2


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def make_module(loss, seed: int = 0) -> PolicyModule:
    return module_helpers.make_module(loss, seed, mu=MU, num_minibatches=NUM_MINIBATCHES)


def fit_one_rollout(module: PolicyModule, tmp_path) -> list[dict[str, str]]:
    """Train on one rollout (MU x NUM_MINIBATCHES optimizer steps); returns the rows of metrics.csv."""
    rows = module_helpers.fit(module, tmp_path, max_steps=MU * NUM_MINIBATCHES)
    assert module.trainer.global_step == MU * NUM_MINIBATCHES
    return rows


def _floats(row: dict[str, str]) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if v != ""}


def _train_row(rows: list[dict[str, str]]) -> dict[str, float]:
    """The rollout's row merged with its last optimizer step's; checks there is one update row per step."""
    updates = [_floats(r) for r in rows if r.get(M.LOSS)]
    assert [int(r["step"]) for r in updates] == list(range(1, MU * NUM_MINIBATCHES + 1))
    [rollout] = [_floats(r) for r in rows if r.get(M.REWARD_MEAN)]
    assert rollout["step"] == MU * NUM_MINIBATCHES  # logged when the rollout's updates are done
    return rollout | updates[-1]


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_one_rollout_moves_every_policy_parameter_and_no_reference_parameter(tmp_path):
    module = make_module(GRPOLoss(beta=0.1))
    reference = module.reference
    assert reference is not None
    assert all(not p.requires_grad for p in reference.parameters())
    policy_before, reference_before = _snapshot(module.policy), _snapshot(reference)
    for name, p in reference.named_parameters():  # the reference starts as an exact copy, in its own memory
        assert torch.equal(p, policy_before[name])
        assert p.data_ptr() != dict(module.policy.named_parameters())[name].data_ptr()

    row = _train_row(fit_one_rollout(module, tmp_path))

    assert module.rollouts_done == 1
    # The precondition of the test: rewards differed within the groups, so the advantages were not all 0.
    assert row[M.REWARD_STD] > 0 and row[M.ADVANTAGE_ABS_MEAN] > 0, row
    assert math.isfinite(row[M.LOSS]) and row[M.GRAD_NORM] > 0
    assert row[M.KL] > 0  # the policy left the reference after the first optimizer step
    assert 0.0 <= row[M.COMPLETION_REPEATS_PROMPT_RATIO] <= 1.0  # logged with the rollout's metrics
    unchanged = [n for n, p in module.policy.named_parameters() if torch.equal(p, policy_before[n])]
    assert not unchanged, f"policy parameters not updated: {unchanged}"
    assert module.reference is reference
    moved = [n for n, p in reference.named_parameters() if not torch.equal(p, reference_before[n])]
    assert not moved, f"reference parameters changed: {moved}"


def test_without_kl_there_is_no_reference_and_training_still_works(tmp_path):
    module = make_module(GRPOLoss(beta=0.0))
    assert module.reference is None
    before = _snapshot(module.policy)
    row = _train_row(fit_one_rollout(module, tmp_path))
    assert module.reference is None
    assert M.KL not in row  # no reference log-probs, so the loss reports no KL
    assert all(not torch.equal(p, before[n]) for n, p in module.policy.named_parameters())


def test_reference_is_not_in_the_state_dict():
    module = make_module(GRPOLoss(beta=0.1))
    assert module.reference is not None
    keys = list(module.state_dict())
    assert keys and all(k.startswith("policy.") for k in keys), keys
    assert len(keys) == len(module.policy.state_dict())
    assert all(p is not q for p in module.parameters() for q in module.reference.parameters())
    assert len(list(module.parameters())) == len(list(module.policy.parameters()))


def test_set_loss_swaps_the_loss_and_builds_the_reference_only_when_needed():
    module = make_module(GRPOLoss(beta=0.0))
    assert module.reference is None
    sapo = SAPOLoss(tau=0.5)
    module.set_loss(sapo)
    assert module.loss_fn is sapo and module.loss_fn.tau == 0.5
    assert module.reference is None  # SAPOLoss's beta is 0 by default
    module.set_loss(GRPOLoss(beta=0.1))  # before training: the reference is built now
    reference = module.reference
    assert reference is not None
    for (name, p), (_, q) in zip(module.policy.named_parameters(), reference.named_parameters(), strict=True):
        assert torch.equal(p, q), name
    module.set_loss(SAPOLoss(tau=0.5, beta=0.2))  # an existing reference is kept, not rebuilt
    assert module.reference is reference
    with pytest.raises(ValueError, match="callable"):
        module.set_loss("grpo")


def test_set_loss_with_kl_after_training_started_raises(tmp_path):
    module = make_module(GRPOLoss(beta=0.0))
    fit_one_rollout(module, tmp_path)
    module.set_loss(SAPOLoss(tau=0.5))  # beta = 0: still allowed
    assert isinstance(module.loss_fn, SAPOLoss)
    with pytest.raises(ValueError, match="beta > 0"):
        module.set_loss(GRPOLoss(beta=0.1))
    assert module.reference is None
    assert isinstance(module.loss_fn, SAPOLoss)  # the refused loss was not installed


def test_micro_batching_gives_the_same_update(tmp_path):
    # The loss gets the minibatch's totals, so splitting it into micro-batches of 3 sequences (uneven: the
    # minibatch holds 8) must give the same gradients, hence the same weights after the same steps.
    whole, split = make_module(GRPOLoss(beta=0.1)), make_module(GRPOLoss(beta=0.1))
    split.optim_cfg.micro_batch_size = 3
    fit_one_rollout(whole, tmp_path / "whole")
    fit_one_rollout(split, tmp_path / "split")
    for (name, a), b in zip(whole.policy.named_parameters(), split.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4, msg=name)


def test_each_rollout_reads_its_prompts_on_the_host_once(tmp_path, monkeypatch):
    """The reference, old-policy and update passes share one PrefixIndex per rollout (a host sync on a GPU)."""
    from twinkle_exp.policy import shared_prefix

    built = []
    original = shared_prefix.PrefixIndex.__init__

    def counting_init(self, *args):
        built.append(1)
        original(self, *args)

    monkeypatch.setattr(shared_prefix.PrefixIndex, "__init__", counting_init)
    module = module_helpers.make_module(
        GRPOLoss(beta=0.1), mu=MU, num_minibatches=NUM_MINIBATCHES, old_logps="recompute"
    )
    module_helpers.fit(module, tmp_path, max_steps=2 * MU * NUM_MINIBATCHES)
    assert module.rollouts_done == 2
    assert len(built) == 2
