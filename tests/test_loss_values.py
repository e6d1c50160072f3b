"""Hand-computed values and gradients of each variant, with the arithmetic in comments."""

from __future__ import annotations

import math

import pytest
import torch
from loss_helpers import IGN, one_token_batch

from twinkle_exp.loss import BNPOLoss, CISPOLoss, DRGRPOLoss, GRPOLoss, GSPOLoss, SAPOLoss
from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss.objectives.soft_gates import SAPO_GATE


def run(loss_fn, ratio, adv):
    logps, labels, advs, old = one_token_batch(ratio, adv)
    out = loss_fn(logps=logps, labels=labels, advantages=advs, old_logps=old)
    out.loss.backward()
    return out, logps.grad[0, 1].item()


# clip_range 0.2: region [0.8, 1.2]. Per-token loss -min(r A, clip(r) A); d/dlogp = -r A where r A is the min.
GRPO_CASES = [
    # ratio, A, loss, grad, low, high
    (1.1, 1.0, -1.1, -1.1, 0, 0),  # inside: -1.1*1
    (0.5, 1.0, -0.5, -0.5, 0, 0),  # below, A > 0: min(0.5, 0.8) = 0.5 is unclipped, gradient flows
    (1.5, 1.0, -1.2, 0.0, 0, 1),  # above, A > 0: min(1.5, 1.2) = 1.2 is the constant, no gradient
    (0.5, -1.0, 0.8, 0.0, 1, 0),  # below, A < 0: min(-0.5, -0.8) = -0.8, constant -> loss 0.8, grad 0
    (1.5, -1.0, 1.5, 1.5, 0, 0),  # above, A < 0: min(-1.5, -1.2) = -1.5 unclipped -> loss 1.5, grad -rA = 1.5
    (1.1, -1.0, 1.1, 1.1, 0, 0),  # inside, A < 0
]


@pytest.mark.parametrize("cls", [GRPOLoss, BNPOLoss, GSPOLoss])
@pytest.mark.parametrize("ratio,adv,loss,grad,low,high", GRPO_CASES)
def test_clipped_single_token(cls, ratio, adv, loss, grad, low, high):
    # With one token, GRPO, BNPO and GSPO (sequence ratio = the token's ratio) all reduce to the PPO clip.
    out, g = run(cls(clip_range=0.2), ratio, adv)
    assert out.loss.item() == pytest.approx(loss)
    assert g == pytest.approx(grad)
    assert out.metrics[K.CLIP_LOW].item() == low
    assert out.metrics[K.CLIP_HIGH].item() == high
    assert out.metrics[K.CLIP_REGION].item() == max(low, high)
    assert out.metrics[K.RATIO_MEAN].item() == pytest.approx(ratio)


def test_clip_higher_is_asymmetric():
    # clip_range_high 0.28: r = 1.25 with A > 0 is inside [0.8, 1.28], so loss -1.25 with gradient -1.25.
    out, g = run(GRPOLoss(clip_range=0.2, clip_range_high=0.28), 1.25, 1.0)
    assert (out.loss.item(), g) == (pytest.approx(-1.25), pytest.approx(-1.25))
    # r = 0.75 with A < 0 is below 0.8: clipped to -0.8 * -1 -> loss 0.8, no gradient.
    out, g = run(GRPOLoss(clip_range=0.2, clip_range_high=0.28), 0.75, -1.0)
    assert (out.loss.item(), g) == (pytest.approx(0.8), 0.0)


def test_drgrpo_divides_by_budget():
    # One token, r = 1.1, A = 1: per-token -1.1; normaliser 1 sequence x budget 4 -> -0.275, grad -1.1/4.
    out, g = run(DRGRPOLoss(clip_range=0.2, max_completion_length=4), 1.1, 1.0)
    assert out.loss.item() == pytest.approx(-0.275)
    assert g == pytest.approx(-0.275)


def test_sapo_gate_values():
    # r = 1, tau = 1, A = 1: sigmoid(0) = 0.5 -> loss -(4/1) 0.5 = -2; gate 4 * 0.5 * 0.5 = 1; grad -1 * r * A = -1.
    out, g = run(SAPOLoss(tau=1.0), 1.0, 1.0)
    assert (out.loss.item(), g) == (pytest.approx(-2.0), pytest.approx(-1.0))
    assert out.metrics[SAPO_GATE].item() == pytest.approx(1.0)
    # r = 1.5, tau = 2, A = 1: s = sigmoid(2 * 0.5) = 0.731059 -> loss -(4/2) s = -1.462117;
    # gate 4 s (1 - s) = 0.786448; grad -gate * r * A = -1.179672.
    out, g = run(SAPOLoss(tau=2.0), 1.5, 1.0)
    assert out.loss.item() == pytest.approx(-1.462117, abs=1e-6)
    assert out.metrics[SAPO_GATE].item() == pytest.approx(0.786448, abs=1e-6)
    assert g == pytest.approx(-1.179672, abs=1e-6)
    # A = -1 uses tau_neg = 1.05: r = 0.8, s = sigmoid(1.05 * -0.2) = sigmoid(-0.21) = 0.447692
    # -> loss -(4 / 1.05) * s * (-1) = 1.705493.
    out, _ = run(SAPOLoss(tau_pos=1.0, tau_neg=1.05), 0.8, -1.0)
    assert out.loss.item() == pytest.approx(1.705493, abs=1e-6)


def test_cispo_caps_weight_with_stop_gradient():
    # r = 1.5, A = 1, cap 1.2: weight sg(min(1.5, 1.2)) = 1.2; loss -1.2 * 1 * log(1.5) = -0.486558;
    # grad d/dlogp = -1.2 (the capped token still gets gradient, unlike PPO's clip).
    out, g = run(CISPOLoss(clip_range=0.2), 1.5, 1.0)
    assert out.loss.item() == pytest.approx(-1.2 * math.log(1.5))
    assert g == pytest.approx(-1.2)
    assert out.metrics[K.CISPO_CLIP].item() == 1.0
    # r = 0.5, A = -1: no lower bound, weight 0.5; loss -0.5 * -1 * log(0.5) = -0.346574; grad +0.5.
    out, g = run(CISPOLoss(clip_range=0.2), 0.5, -1.0)
    assert out.loss.item() == pytest.approx(0.5 * math.log(0.5))
    assert g == pytest.approx(0.5)
    assert out.metrics[K.CISPO_CLIP].item() == 0.0
    assert out.metrics[K.CLIP_LOW].item() == 0.0


def test_gspo_sequence_ratio():
    # Two tokens with log-ratios log 1.2 and 0: s = exp(log(1.2) / 2) = sqrt(1.2) = 1.095445.
    logps = torch.tensor([[0.0, math.log(1.2), 0.0]], dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([[IGN, 3, 4]])
    kwargs = {"labels": labels, "advantages": torch.tensor([1.0], dtype=torch.float64)}
    kwargs["old_logps"] = torch.zeros(1, 3, dtype=torch.float64)
    out = GSPOLoss(clip_range=0.2)(logps=logps, **kwargs)
    out.loss.backward()
    # Inside [0.8, 1.2]: loss -s; d/dlogp_t = -s / 2 for each token.
    assert out.loss.item() == pytest.approx(-math.sqrt(1.2))
    assert logps.grad[0, 1:].tolist() == pytest.approx([-math.sqrt(1.2) / 2] * 2)
    assert out.metrics[K.RATIO_MEAN].item() == pytest.approx(math.sqrt(1.2))
    # GSPO's recipe clip 3e-4 puts s above 1.0003 with A > 0: loss -1.0003, no gradient, both tokens clipped.
    logps.grad = None
    out = GSPOLoss(clip_range=3e-4, clip_range_high=4e-4)(logps=logps, **kwargs)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-1.0004)
    assert logps.grad.abs().sum().item() == 0.0
    assert out.metrics[K.CLIP_HIGH].item() == 1.0


def test_aggregations_weigh_tokens_differently():
    # Sequence 0: 1 token, A = +1; sequence 1: 3 tokens, A = -1; on-policy, so every per-token loss is -A.
    labels = torch.tensor([[IGN, 1, IGN, IGN], [IGN, 1, 2, 3]])
    logps = torch.zeros(2, 4, dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    results = {
        # mean over sequences of token means: (-1 + 1) / 2 = 0
        GRPOLoss(): 0.0,
        # token mean over the batch: (-1 + 1 + 1 + 1) / 4 = 0.5
        BNPOLoss(): 0.5,
        # sum / (2 sequences x budget 4) = 2 / 8 = 0.25
        DRGRPOLoss(max_completion_length=4): 0.25,
    }
    for loss_fn, expected in results.items():
        assert loss_fn(logps=logps, labels=labels, advantages=adv).loss.item() == pytest.approx(expected)


def test_kl_term_and_metrics():
    # One token, on-policy, logp = ref - 0.5: k3 = exp(0.5) - 0.5 - 1 = 0.148721; beta 0.1 adds 0.0148721.
    logps = torch.tensor([[0.0, -1.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[0.0, -0.5]], dtype=torch.float64)
    labels = torch.tensor([[IGN, 2]])
    out = GRPOLoss(beta=0.1)(logps=logps, labels=labels, advantages=torch.zeros(1), ref_logps=ref)
    assert out.metrics[K.KL].item() == pytest.approx(math.exp(0.5) - 1.5)
    assert out.loss.item() == pytest.approx(0.1 * (math.exp(0.5) - 1.5))
    assert out.metrics[K.POLICY_LOSS].item() == 0.0
    k1 = GRPOLoss(beta=0.1, kl_estimator="k1")(
        logps=logps, labels=labels, advantages=torch.zeros(1), ref_logps=ref
    )
    assert k1.metrics[K.KL].item() == pytest.approx(-0.5)  # logp - ref
    k2 = GRPOLoss(beta=0.1, kl_estimator="k2")(
        logps=logps, labels=labels, advantages=torch.zeros(1), ref_logps=ref
    )
    assert k2.metrics[K.KL].item() == pytest.approx(0.125)  # 0.5 * 0.5^2
