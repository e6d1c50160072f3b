"""What each KL estimator's gradient does, from exact expectations over a small categorical (float64).

The loss differentiates `beta * k(logp, ref)` at the policy's own samples: the samples' probabilities are
weights without a gradient. Its expected gradient is therefore `sum_x pi(x) d k(log pi(x), log ref(x))`,
which this computes exactly for a 6-way softmax policy, and compares with the gradients of both KLs.
"""

from __future__ import annotations

import logging

import pytest
import torch

from twinkle_exp.loss.kl import kl_penalty

TOL = 1e-12


def categorical(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Policy logits `[6]` (a leaf with grad) and reference log-probs `[6]`, far enough apart to tell."""
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(6, generator=g, dtype=torch.float64).requires_grad_()
    ref = torch.log_softmax(2 * torch.randn(6, generator=g, dtype=torch.float64), -1)
    return theta, ref


def expected_sample_gradient(theta: torch.Tensor, ref: torch.Tensor, estimator: str) -> torch.Tensor:
    """`E_{x ~ pi}[d k(x) / d theta]` with the sampling distribution held fixed (what the loss computes)."""
    logp = torch.log_softmax(theta, -1)
    (grad,) = torch.autograd.grad((logp.exp().detach() * kl_penalty(logp, ref, estimator)).sum(), theta)
    return grad


def kl_gradients(theta: torch.Tensor, ref: torch.Tensor) -> dict[str, torch.Tensor]:
    """The exact gradients of KL(pi || ref) ("forward") and KL(ref || pi) ("reverse") w.r.t. theta."""
    logp = torch.log_softmax(theta, -1)
    forward = (logp.exp() * (logp - ref)).sum()
    reverse = (ref.exp() * (ref - logp)).sum()
    return {
        "pi||ref": torch.autograd.grad(forward, theta, retain_graph=True)[0],
        "ref||pi": torch.autograd.grad(reverse, theta)[0],
    }


@pytest.mark.parametrize("seed", range(5))
def test_each_estimators_expected_gradient(seed):
    theta, ref = categorical(seed)
    kl = kl_gradients(theta, ref)
    # The two KLs' gradients differ here, so matching one of them says something.
    assert (kl["pi||ref"] - kl["ref||pi"]).abs().max() > 1e-2
    k1 = expected_sample_gradient(theta, ref, "k1")
    k2 = expected_sample_gradient(theta, ref, "k2")
    k3 = expected_sample_gradient(theta, ref, "k3")
    # k1: E_pi[grad log pi] = 0, whatever pi and ref: beta x k1 pulls the policy nowhere.
    assert k1.abs().max() < TOL, k1
    # k2: the gradient of KL(pi || ref), the divergence the penalty is named after (docs/losses.md).
    assert (k2 - kl["pi||ref"]).abs().max() < TOL
    # k3 (the default): the gradient of the other direction, KL(ref || pi).
    assert (k3 - kl["ref||pi"]).abs().max() < TOL
    assert (k3 - kl["pi||ref"]).abs().max() > 1e-2


@pytest.mark.parametrize("seed", range(5))
def test_the_values_k1_and_k3_are_unbiased_for_kl_pi_ref_and_k2_is_not(seed):
    # What the logged `kl` metric estimates: k1's value looks as plausible as k3's.
    theta, ref = categorical(seed)
    logp = torch.log_softmax(theta.detach(), -1)
    kl = (logp.exp() * (logp - ref)).sum()
    mean = {k: (logp.exp() * kl_penalty(logp, ref, k)).sum() for k in ("k1", "k2", "k3")}
    assert abs(mean["k1"] - kl) < TOL and abs(mean["k3"] - kl) < TOL
    assert abs(mean["k2"] - kl) > 1e-3


def test_k3_keeps_pulling_back_a_token_far_above_the_reference():
    # logp - ref = 30 nats: KL(ref || pi)'s per-token gradient w.r.t. logp is 1 - exp(ref - logp) ~ 1.
    logps = torch.tensor([-1.0], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([-31.0], dtype=torch.float64)
    value = kl_penalty(logps, ref, "k3")
    (grad,) = torch.autograd.grad(value.sum(), logps)
    assert abs(value.item() - (30 - 1 + torch.exp(torch.tensor(-30.0)).item())) < 1e-9
    assert abs(float(grad) - 1.0) < 1e-9


def test_k3_stays_finite_where_the_reference_gives_the_token_probability_zero():
    value = kl_penalty(torch.tensor([-1.0]), torch.tensor([float("-inf")]), "k3")
    assert torch.isfinite(value).all() and value.item() == 999.0


# --- the start-up warning -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides, warns",
    [
        (["loss.kl_estimator=k1", "loss.beta=0.01"], True),
        (["loss.kl_estimator=k1", "loss.beta=0"], False),  # no penalty: the estimator only feeds the metric
        (["loss.kl_estimator=k3", "loss.beta=0.01"], False),
        (["loss=sapo", "loss.kl_estimator=k1", "loss.beta=0.5"], True),
    ],
)
def test_k1_with_a_penalty_warns_at_start_up(overrides, warns, caplog):
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from twinkle_exp.config.checks import check_config
    from twinkle_exp.config.store import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    with caplog.at_level(logging.WARNING, logger="twinkle_exp.config.checks"):
        check_config(cfg)
    assert ("loss.kl_estimator=k1 with loss.beta=" in caplog.text) == warns, caplog.text
    if warns:
        assert "regularises nothing" in caplog.text
