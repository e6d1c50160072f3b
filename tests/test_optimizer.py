"""The update's AdamW: fused where it applies, and then the loop's result up to float rounding."""

import pytest
import torch

from twinkle_exp.training.optimizer import adamw, fused_applies


def _trained(fused: bool, steps: int = 20) -> list[torch.Tensor]:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s)) for s in ((64, 32), (32,), (7, 5, 3))]
    if fused:
        opt = adamw(params, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.01, fused=True)
    else:
        opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.01)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    return [p.detach() for p in params]


def test_fused_on_plain_cpu_parameters():
    params = [torch.nn.Parameter(torch.zeros(3))]
    assert fused_applies(params, loss_scaler=None)
    assert adamw(params, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0, fused=True).defaults["fused"] is True
    assert not adamw(params, lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0).defaults["fused"]  # opt-in


def test_the_loop_is_kept_with_a_loss_scaler_or_non_float_parameters():
    assert not fused_applies([torch.nn.Parameter(torch.zeros(3))], loss_scaler=object())
    assert not fused_applies([torch.zeros(3, dtype=torch.long)], loss_scaler=None)
    assert not fused_applies([], loss_scaler=None)
    opt = adamw(
        [torch.nn.Parameter(torch.zeros(3))],
        lr=1e-3,
        betas=(0.9, 0.99),
        weight_decay=0.0,
        fused=True,
        loss_scaler=object(),
    )
    assert not opt.defaults["fused"]


def test_fused_matches_the_loop_up_to_rounding():
    for fused, loop in zip(_trained(fused=True), _trained(fused=False), strict=True):
        assert not torch.equal(fused, torch.zeros_like(fused))
        torch.testing.assert_close(fused, loop, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_optim_fused_adamw_reaches_the_modules_optimizer_and_trains_as_the_loop_does(tmp_path):
    import module_helpers

    from twinkle_exp.loss import GRPOLoss

    trained = {}
    for fused in (False, True):
        module = module_helpers.make_module(GRPOLoss(beta=0.1), mu=2, num_minibatches=1, fused_adamw=fused)
        module_helpers.fit(module, tmp_path / str(fused), max_steps=2)
        assert bool(module.optimizers().optimizer.defaults["fused"]) is fused
        trained[fused] = [p.detach().clone() for p in module.policy.parameters()]
    for fused, loop in zip(trained[True], trained[False], strict=True):
        torch.testing.assert_close(fused, loop, rtol=0, atol=1e-5)
