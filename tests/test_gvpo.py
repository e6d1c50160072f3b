"""GVPO (arXiv 2504.19599): its value and gradient against a float64 transcription of the authors' recipe
(verl recipe/gvpo, compute_policy_loss_gvpo), whole-group splits, and its refusals."""

from __future__ import annotations

import json

import pytest
import torch

from twinkle_exp.config.schema import whole_groups_problem
from twinkle_exp.loss import LOSSES

IGN = -100
PROMPT = 2
LENGTHS = [3, 1, 4, 2, 5, 2]  # two groups of three
GROUPS = torch.tensor([0, 0, 0, 1, 1, 1])


def _batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    rows, width = len(LENGTHS), PROMPT + max(LENGTHS)
    labels = torch.full((rows, width), IGN)
    mask = torch.zeros(rows, width, dtype=torch.bool)
    for i, n in enumerate(LENGTHS):
        labels[i, PROMPT : PROMPT + n] = torch.randint(0, 7, (n,), generator=gen)
        mask[i, PROMPT : PROMPT + n] = True
    logp = (-torch.rand(rows, width, generator=gen, dtype=torch.float64) * 3 - 0.05) * mask
    old = (logp + 0.3 * torch.randn(rows, width, generator=gen, dtype=torch.float64)) * mask
    rewards = torch.rand(rows, generator=gen, dtype=torch.float64)
    means = torch.stack([rewards[g == GROUPS].mean() for g in GROUPS])
    return labels, mask, logp, old, rewards - means  # advantage=unscaled: reward - group mean


def _recipe_loss(logps, old, mask, adv, beta):
    """The recipe's loop, transcribed: per sequence rtheta = beta (sum logp - sum old), its group's mean,
    0.5 ((rtheta - mean) - A)^2 summed and divided by (n - 1); here averaged over the groups."""
    rtheta = beta * ((logps * mask).sum(-1) - (old * mask).sum(-1))
    total = 0.0
    for g in GROUPS.unique():
        members = (g == GROUPS).nonzero().flatten()
        mean = rtheta[members].mean()
        n = len(members)
        total = total + sum(0.5 * ((rtheta[i] - mean) - adv[i]) ** 2 for i in members) / (n - 1)
    return total / len(GROUPS.unique())


@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_value_and_gradient_equal_the_recipe_in_float64(beta):
    labels, mask, logp, old, adv = _batch()
    leaf = logp.clone().requires_grad_(True)
    out = LOSSES["gvpo"](gvpo_beta=beta)(
        logps=leaf, labels=labels, old_logps=old, advantages=adv, group_index=GROUPS
    )
    out.loss.backward()
    want_leaf = logp.clone().requires_grad_(True)
    want = _recipe_loss(want_leaf, old, mask, adv, beta)
    want.backward()
    torch.testing.assert_close(out.loss, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(leaf.grad, want_leaf.grad, rtol=1e-12, atol=1e-12)
    assert float(out.loss.detach()) > 0


def test_micro_batches_of_whole_groups_sum_to_the_step():
    labels, mask, logp, old, adv = _batch(1)
    loss_fn = LOSSES["gvpo"]()
    full_leaf = logp.clone().requires_grad_(True)
    full = loss_fn(logps=full_leaf, labels=labels, old_logps=old, advantages=adv, group_index=GROUPS)
    full.loss.backward()
    part_leaf = logp.clone().requires_grad_(True)
    total = 0.0
    for rows in (slice(0, 3), slice(3, 6)):
        part = loss_fn(
            logps=part_leaf[rows], labels=labels[rows], old_logps=old[rows], advantages=adv[rows],
            group_index=GROUPS[rows], num_sequences=len(LENGTHS),
        )  # fmt: skip
        part.loss.backward()
        total = total + part.loss.detach()
    torch.testing.assert_close(total, full.loss.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(part_leaf.grad, full_leaf.grad, rtol=1e-12, atol=1e-12)


def test_on_policy_its_gradient_is_minus_beta_advantage_times_the_sequence_gradient():
    # logp = old: every residual is -A_i, and the group means of the residuals are 0 (A is centred), so
    # d loss / d logp_t = -beta A_i / ((G - 1) x groups) on each token of sequence i: the recipe's weight
    # w_i = A_i - beta (log-ratio - its mean) = A_i, times beta, over (G - 1) and the step's groups.
    labels, mask, logp, _, adv = _batch(2)
    leaf = logp.clone().requires_grad_(True)
    LOSSES["gvpo"](gvpo_beta=0.5)(
        logps=leaf, labels=labels, old_logps=logp, advantages=adv, group_index=GROUPS
    ).loss.backward()
    per_row = -0.5 * adv / (2 * 2)  # beta = 0.5, G - 1 = 2, 2 groups
    torch.testing.assert_close(leaf.grad, per_row[:, None] * mask, rtol=1e-12, atol=1e-12)


def test_it_refuses_a_call_without_groups_a_lone_sequence_and_rollout_weights():
    labels, mask, logp, old, adv = _batch()
    loss_fn = LOSSES["gvpo"]()
    args = dict(logps=logp, labels=labels, old_logps=old, advantages=adv)
    with pytest.raises(ValueError, match="needs each sequence's group"):
        loss_fn(**args)
    with pytest.raises(ValueError, match="whole groups of at least two"):
        loss_fn(**args, group_index=torch.tensor([0, 0, 0, 1, 1, 2]))
    with pytest.raises(ValueError, match="no rollout-correction weights"):
        loss_fn(**args, group_index=GROUPS, rollout_weights=torch.ones_like(logp))
    with pytest.raises(ValueError, match="expected \\[6\\], one group per sequence"):
        loss_fn(**args, group_index=GROUPS[:4])


def test_the_start_up_check_asks_for_minibatches_and_micro_batches_of_whole_groups():
    gvpo, grpo = LOSSES["gvpo"](), LOSSES["grpo"]()
    assert whole_groups_problem(grpo, {"minibatch_split": "rows"}, 8) is None
    assert "optim.minibatch_split=groups" in whole_groups_problem(gvpo, {"minibatch_split": "rows"}, 8)
    micro = whole_groups_problem(gvpo, {"minibatch_split": "groups", "micro_batch_size": 12}, 8)
    assert "optim.micro_batch_size=12 must be a multiple of rollout.group_size=8" in micro
    assert whole_groups_problem(gvpo, {"minibatch_split": "groups", "micro_batch_size": 16}, 8) is None
    assert "group_size must be >= 2" in whole_groups_problem(gvpo, {"minibatch_split": "groups"}, 1)


@pytest.mark.slow
def test_the_paper_recipe_trains_from_the_cli(run_cli, tmp_path):
    run_dir = tmp_path / "run"
    proc = run_cli("+experiment=gvpo_paper", "debug=fast", "logger=csv", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "finished"
    config = (run_dir / ".hydra" / "config.yaml").read_text()
    assert "_target_: twinkle_exp.loss.GVPOLoss" in config and "minibatch_split: groups" in config
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    losses = [
        float(r.split(",")[header.index("train/loss")])
        for r in rows[1:]
        if r.split(",")[header.index("train/loss")]
    ]
    assert losses and all(value >= 0 for value in losses), losses  # a sum of squares


def test_the_zoo_sweep_leaves_gvpo_to_its_recipe():
    from hydra import compose, initialize_config_module

    from twinkle_exp.config.store import register_configs

    register_configs()
    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        zoo = compose("config", overrides=["+sweep=zoo"], return_hydra_config=True).hydra.sweeper.params.loss
    assert "grpo" in zoo.split(",") and "gvpo" not in zoo.split(",")
    assert len(zoo.split(",")) == len(LOSSES) - 1
