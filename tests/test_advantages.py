import math

import pytest
import torch

from twinkle_exp.loss.advantages import group_advantages


def test_group_scale_hand_computed():
    # one group [1, 0, 0, 1]: mean 0.5, deviations +-0.5, unbiased std = sqrt(4 * 0.25 / 3) = sqrt(1/3)
    # A = +-0.5 / sqrt(1/3) = +-0.8660254
    res = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=4, eps=0.0)
    assert res.advantages.tolist() == pytest.approx([0.8660254, -0.8660254, -0.8660254, 0.8660254], rel=1e-6)
    assert res.advantages.dtype == torch.float32
    assert res.num_zero_std_groups == 0 and res.frac_zero_std == 0.0


def test_group_scale_is_per_group():
    # [1, 0] -> mean 0.5, std sqrt(0.5): +-0.5/0.7071 = +-0.7071
    # [3, 1] -> mean 2,   std sqrt(2):   +-1/1.4142   = +-0.7071  (same, since scaling is per group)
    res = group_advantages(torch.tensor([1.0, 0.0, 3.0, 1.0]), group_size=2, eps=0.0)
    h = math.sqrt(0.5)
    assert res.advantages.tolist() == pytest.approx([h, -h, h, -h], rel=1e-6)


def test_eps_enters_the_denominator():
    # [2, 0]: deviations +-1, std sqrt(2); eps = 0.5 -> A = 1 / (1.41421 + 0.5) = 0.522408
    res = group_advantages(torch.tensor([2.0, 0.0]), group_size=2, eps=0.5)
    assert res.advantages.tolist() == pytest.approx([0.522408, -0.522408], rel=1e-5)


def test_batch_scale_hand_computed():
    # rewards [1, 0, 3, 1], groups of 2: centered by group means (0.5, 2) -> [0.5, -0.5, 1, -1]
    # batch mean 1.25, squared deviations 0.0625 + 1.5625 + 3.0625 + 0.0625 = 4.75,
    # unbiased std = sqrt(4.75 / 3) = 1.258306 -> A = [0.397360, -0.397360, 0.794719, -0.794719]
    res = group_advantages(torch.tensor([1.0, 0.0, 3.0, 1.0]), group_size=2, scale="batch", eps=0.0)
    assert res.advantages.tolist() == pytest.approx([0.397360, -0.397360, 0.794719, -0.794719], rel=1e-5)


def test_none_scale_only_centers():
    res = group_advantages(torch.tensor([1.0, 0.0, 3.0, 1.0]), group_size=2, scale="none")
    assert res.advantages.tolist() == [0.5, -0.5, 1.0, -1.0]


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("eps", [0.0, 1e-6])
def test_zero_std_groups_are_exactly_zero_and_counted(scale, eps):
    # 0.7 * 3 / 3 is not exactly 0.7 in floating point; the zero-std groups must still give exact zeros
    rewards = torch.tensor([0.7, 0.7, 0.7, 1.0, 0.0, 0.2, 0.1, 0.1, 0.1, 2.0, 2.0, 2.0])
    res = group_advantages(rewards, group_size=3, scale=scale, eps=eps)
    adv = res.advantages
    assert torch.equal(adv[0:3], torch.zeros(3))
    assert torch.equal(adv[6:12], torch.zeros(6))
    assert torch.isfinite(adv).all()
    assert (adv[3:6] != 0).all()
    assert res.num_zero_std_groups == 3
    assert res.frac_zero_std == 0.75


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_all_equal_batch_is_all_zero(scale):
    res = group_advantages(torch.full((6,), 0.3), group_size=2, scale=scale, eps=0.0)
    assert torch.equal(res.advantages, torch.zeros(6))
    assert res.num_zero_std_groups == 3 and res.frac_zero_std == 1.0


def test_group_size_one_gives_zeros():
    res = group_advantages(torch.tensor([1.0, 2.0, 3.0]), group_size=1)
    assert torch.equal(res.advantages, torch.zeros(3))
    assert res.num_zero_std_groups == 3 and res.frac_zero_std == 1.0


def test_groups_sum_to_zero_and_no_grad():
    rewards = torch.rand(32, requires_grad=True)
    res = group_advantages(rewards, group_size=8, scale="none")
    assert not res.advantages.requires_grad
    assert res.advantages.reshape(4, 8).sum(dim=1).abs().max() < 1e-6


def test_non_float_rewards_accepted():
    res = group_advantages(torch.tensor([1, 0]), group_size=2, scale="none")
    assert res.advantages.tolist() == [0.5, -0.5] and res.advantages.dtype == torch.float32


def test_empty_batch():
    res = group_advantages(torch.zeros(0), group_size=4)
    assert res.advantages.shape == (0,) and res.num_zero_std_groups == 0 and res.frac_zero_std == 0.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rewards=torch.zeros(5), group_size=2), "5 is not divisible by group_size 2"),
        (dict(rewards=torch.zeros(4), group_size=0), "group_size must be an int >= 1"),
        (
            dict(rewards=torch.zeros(4), group_size=2, scale="std"),
            r"unknown advantage scale 'std'.*group, batch, none",
        ),
        (dict(rewards=torch.tensor([1.0, math.nan]), group_size=2), "finite"),
        (dict(rewards=torch.tensor([1.0, math.inf]), group_size=2), "finite"),
        (dict(rewards=torch.zeros(2, 2), group_size=2), r"1-D"),
        (dict(rewards=torch.zeros(4), group_size=2, eps=-1.0), "eps"),
    ],
)
def test_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(**kwargs)
