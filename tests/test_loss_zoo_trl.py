"""The zoo against TRL's own functions where TRL exposes them without a trainer (skipped without trl):
VESPO's gamma weights, DeepSeek-V3.2's off-policy sequence mask and the top-entropy token mask."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from loss_zoo_helpers import IGN, PROMPT, zoo_batch

from twinkle_exp.loss import LOSSES
from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss.objectives.reinforce import VESPO_PHI

GRPOTrainer = pytest.importorskip("trl.trainer.grpo_trainer").GRPOTrainer
LENGTHS = [3, 1, 5, 2, 4]


def completion_view(inputs):
    """TRL's layout: completion tokens only, `[B, C]`, with its 0/1 mask."""
    cols = slice(PROMPT, None)
    mask = (inputs["labels"][:, cols] != IGN).double()
    view = {k: inputs[k][:, cols] for k in ("logps", "old_logps", "ref_logps", "entropies")}
    return view, mask


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("ks", [(2.0, 3.0, 3.0, 2.0), (1.0, 0.5, 4.0, 6.0)])
def test_vespo_matches_trl_gamma_weights(seed, ks):
    inputs, _ = zoo_batch(LENGTHS, seed=seed)
    k_pos, lambda_pos, k_neg, lambda_neg = ks
    ours = LOSSES["vespo"](k_pos=k_pos, lambda_pos=lambda_pos, k_neg=k_neg, lambda_neg=lambda_neg)(**inputs)
    v, mask = completion_view(inputs)
    adv = inputs["advantages"][:, None]
    phi = GRPOTrainer.get_gamma_weights(
        advantages=adv,
        log_ratio_per_token=v["logps"] - v["old_logps"],
        mask=mask,
        importance_sampling_ratio=None,
        k_pos=k_pos,
        lambda_pos=lambda_pos,
        k_neg=k_neg,
        lambda_neg=lambda_neg,
    )
    # TRL's vespo: per-token -phi A logp, summed and divided by the step's token count.
    trl_loss = (-phi * adv * v["logps"] * mask).sum() / mask.sum()
    torch.testing.assert_close(ours.loss, trl_loss)
    g_ours = torch.autograd.grad(ours.loss, inputs["logps"])[0]
    g_trl = torch.autograd.grad(trl_loss, inputs["logps"])[0]
    torch.testing.assert_close(g_ours, g_trl)
    phi_mean = (phi.expand_as(mask) * mask).sum() / mask.sum()  # TRL logs a per-sequence mean instead
    assert ours.metrics[VESPO_PHI].item() == pytest.approx(phi_mean.item(), rel=1e-6)


@pytest.mark.parametrize("threshold", [-0.5, 0.0, 0.05, 0.3])
def test_off_policy_mask_matches_trl(threshold):
    inputs, _ = zoo_batch(LENGTHS, seed=3, spread=0.5)
    ours = LOSSES["grpo"](off_policy_mask_threshold=threshold)(**dict(inputs, ref_logps=None))
    v, mask = completion_view(inputs)
    adv = inputs["advantages"][:, None]
    keep = GRPOTrainer.get_off_policy_mask(adv, v["logps"], v["old_logps"], mask, threshold)
    coef_1 = torch.exp(v["logps"] - v["old_logps"])
    per_token = -torch.min(coef_1 * adv, coef_1.clamp(0.8, 1.2) * adv) * keep
    trl_loss = ((per_token * mask).sum(-1) / mask.sum(-1)).mean()  # TRL's grpo aggregation
    torch.testing.assert_close(ours.loss, trl_loss)
    torch.testing.assert_close(
        torch.autograd.grad(ours.loss, inputs["logps"])[0], torch.autograd.grad(trl_loss, inputs["logps"])[0]
    )
    dropped = ((1 - keep) * mask).sum() / mask.sum()
    assert ours.metrics[K.OFF_POLICY_MASKED].item() == pytest.approx(dropped.item())


@pytest.mark.parametrize("quantile", [0.2, 0.5, 0.9])
def test_top_entropy_mask_matches_trl(quantile):
    inputs, _ = zoo_batch(LENGTHS, seed=4)
    ours = LOSSES["gpg"](top_entropy_quantile=quantile)(**dict(inputs, ref_logps=None))
    v, mask = completion_view(inputs)
    one_process = SimpleNamespace(
        accelerator=SimpleNamespace(pad_across_processes=lambda t, **_: t, gather=lambda t: t)
    )
    keep = GRPOTrainer.get_high_entropy_mask(one_process, v["entropies"], mask, 1 - quantile)
    trl_loss = (-inputs["advantages"][:, None] * v["logps"] * keep * mask).sum() / mask.sum()
    torch.testing.assert_close(ours.loss, trl_loss)
    assert ours.metrics[K.TOP_ENTROPY_KEPT].item() == pytest.approx(
        (keep * mask).sum().item() / mask.sum().item()
    )
