"""ReMax (`remax`) and the entropy-shaped advantage (`entropy_shaped`) against their formulas, written out here
in Python floats, and ReMax against verl's own function, transcribed from verl/trainer/ppo/core_algos.py at
b178a3cd, lines 622-654 (compute_remax_outcome_advantage; verl is not installable here). The greedy baseline's
and the per-token term's wiring in the RL step is tested in tests/test_rl_step_extras.py."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from twinkle_exp.config.schema import AdvantageConfig
from twinkle_exp.loss.advantages import ESTIMATORS, AdvantageSettings, estimate, registry, token_shaping

G = 4


def verl_remax(token_level_rewards, reward_baselines, response_mask):
    """verl core_algos.py 650-654 (b178a3cd), transcribed: token returns (reverse cumulative sum of the token
    rewards) minus the baseline on every response token."""
    with torch.no_grad():
        returns = (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
        advantages = returns - reward_baselines.unsqueeze(-1) * response_mask
    return advantages, returns


def _batch(seed: int, groups: int = 5):
    rng = random.Random(seed)
    rewards = [round(rng.uniform(-1, 2), 3) for _ in range(groups * G)]
    rewards[G : 2 * G] = [0.7] * G  # a group of equal rewards: ReMax still compares it with its greedy reward
    greedy = [round(rng.uniform(-1, 2), 3) for _ in range(groups)]
    lengths = [rng.randint(1, 12) for _ in range(groups * G)]
    return rewards, greedy, lengths


def ref_remax(rewards, greedy):
    return [r - greedy[i // G] for i, r in enumerate(rewards)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_remax_is_the_reward_minus_the_greedy_reward(seed):
    rewards, greedy, lengths = _batch(seed)
    got = estimate(
        "remax", torch.tensor(rewards), G, torch.tensor(lengths), greedy_rewards=torch.tensor(greedy)
    )
    assert got.advantages.tolist() == pytest.approx(ref_remax(rewards, greedy), rel=1e-6, abs=1e-6)
    assert got.advantages[G : 2 * G].abs().min() > 0  # not zeroed: the baseline is not the group's


@pytest.mark.parametrize("seed", [0, 1])
def test_remax_equals_verls_function(seed):
    rewards, greedy, lengths = _batch(seed)
    width = max(lengths) + 2
    mask = torch.tensor([[1.0] * n + [0.0] * (width - n) for n in lengths], dtype=torch.float64)
    # An outcome reward sits on the response's last token, as verl's reward managers place it.
    token_rewards = torch.zeros_like(mask)
    token_rewards[torch.arange(len(lengths)), torch.tensor(lengths) - 1] = torch.tensor(
        rewards, dtype=torch.float64
    )
    # verl repeats the prompt-level baseline over the n responses, interleaved (ray_trainer: batch.repeat).
    baselines = torch.tensor(greedy, dtype=torch.float64).repeat_interleave(G)
    want, _ = verl_remax(token_rewards, baselines, mask)
    got = estimate(
        "remax", torch.tensor(rewards), G, torch.tensor(lengths), greedy_rewards=torch.tensor(greedy)
    )
    for i, n in enumerate(lengths):  # every response token carries the one sequence-level value
        assert want[i, :n].tolist() == pytest.approx([got.advantages[i].item()] * n, rel=1e-6, abs=1e-6)


def test_remax_is_invariant_to_the_order_of_groups():
    rewards, greedy, lengths = _batch(3)
    whole = estimate("remax", torch.tensor(rewards), G, greedy_rewards=torch.tensor(greedy)).advantages
    perm = [2, 0, 4, 1, 3]  # ranks' shares gathered in another order: the same values, moved
    shuffled = [rewards[g * G + j] for g in perm for j in range(G)]
    again = estimate(
        "remax", torch.tensor(shuffled), G, greedy_rewards=torch.tensor([greedy[g] for g in perm])
    ).advantages
    assert again.tolist() == [whole[g * G + j].item() for g in perm for j in range(G)]


@pytest.mark.parametrize(
    ("name", "greedy", "message"),
    [
        ("remax", None, "remax needs greedy_rewards"),
        ("rloo", [0.0, 1.0], "rloo does not take greedy_rewards"),
        ("remax", [0.0], r"greedy_rewards must be \[groups\] = \(2,\)"),
        ("remax", [0.0, float("nan")], "greedy_rewards must be finite"),
    ],
)
def test_greedy_rewards_are_checked(name, greedy, message):
    with pytest.raises(ValueError, match=message):
        estimate(
            name,
            torch.tensor([1.0, 0.0, 0.5, 0.5]),
            2,
            greedy_rewards=None if greedy is None else torch.tensor(greedy),
        )


def test_a_broken_remax_fails_its_reference(monkeypatch):
    broken = registry.Estimator(
        **{**vars(ESTIMATORS["remax"]), "fn": lambda r, lens, s, greedy: r - r.mean(dim=1, keepdim=True)}
    )
    monkeypatch.setitem(ESTIMATORS, "remax", broken)  # the group mean where the greedy reward belongs
    with pytest.raises(AssertionError):
        test_remax_is_the_reward_minus_the_greedy_reward(0)


# --- entropy_shaped ----------------------------------------------------------------------------------------
def ref_entropy_shaped(adv, entropies, mask, alpha, kappa):
    """Per token: A + min(alpha * H_t, |A| / kappa) on completion tokens, 0 elsewhere (arXiv 2506.14758)."""
    return [
        [(a + min(alpha * h, abs(a) / kappa)) if m else 0.0 for h, m in zip(row_h, row_m, strict=True)]
        for a, row_h, row_m in zip(adv, entropies, mask, strict=True)
    ]


def _tokens(seed: int, rows: int = 6, width: int = 7):
    gen = torch.Generator().manual_seed(seed)
    adv = (torch.rand(rows, generator=gen, dtype=torch.float64) * 4 - 2).tolist()
    adv[1] = 0.0  # a zero-std group's advantage: no term at all
    entropies = (torch.rand(rows, width, generator=gen, dtype=torch.float64) * 6).tolist()  # both clip sides
    mask = (torch.rand(rows, width, generator=gen) < 0.7).tolist()
    return adv, entropies, mask


def test_entropy_shaped_per_sequence_part_is_grpos_advantage():
    rewards = torch.tensor([0.0, 1.0, 0.5, 0.25, 1.0, 1.0, 1.0, 1.0])
    for scale in ("group", "batch", "none"):
        s = AdvantageSettings(scale=scale)
        want = estimate("group_relative", rewards, G, settings=s).advantages
        assert torch.equal(estimate("entropy_shaped", rewards, G, settings=s).advantages, want)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("alpha", "kappa"), [(0.4, 2.0), (0.1, 3.0)])
def test_entropy_shaped_token_term_equals_its_formula(seed, alpha, kappa):
    adv, entropies, mask = _tokens(seed)
    shape = token_shaping("entropy_shaped", AdvantageSettings(entropy_alpha=alpha, entropy_kappa=kappa))
    f64 = torch.float64
    got = shape(torch.tensor(adv, dtype=f64), torch.tensor(entropies, dtype=f64), torch.tensor(mask))
    assert got.dtype == torch.float64
    want = ref_entropy_shaped(adv, entropies, mask, alpha, kappa)
    assert got.tolist() == [pytest.approx(row, rel=1e-12, abs=1e-12) for row in want]


def test_the_term_is_clipped_at_the_advantage_over_kappa_and_keeps_its_sign():
    shape = token_shaping("entropy_shaped", AdvantageSettings(entropy_alpha=0.4, entropy_kappa=2.0))
    got = shape(
        torch.tensor([1.0, 1.0, -1.0, 0.0]),
        torch.tensor([[0.5], [5.0], [5.0], [5.0]]),
        torch.ones(4, 1, dtype=torch.bool),
    )
    # 1 + 0.4 * 0.5; 1 + min(2, 0.5); -1 + min(2, 0.5): still negative; 0: no term
    assert got.flatten().tolist() == pytest.approx([1.2, 1.5, -0.5, 0.0])


def test_the_entropy_is_detached():
    entropies = torch.full((2, 3), 0.5, requires_grad=True)
    shape = token_shaping("entropy_shaped", AdvantageSettings())
    out = shape(torch.tensor([1.0, -1.0]), entropies, torch.ones(2, 3, dtype=torch.bool))
    assert not out.requires_grad


def test_the_token_term_is_micro_batch_invariant():
    adv, entropies, mask = _tokens(4)
    shape = token_shaping("entropy_shaped", AdvantageSettings())
    a, h, m = (
        torch.tensor(adv, dtype=torch.float64),
        torch.tensor(entropies, dtype=torch.float64),
        torch.tensor(mask),
    )
    whole = shape(a, h, m)
    parts = [shape(a[rows], h[rows], m[rows]) for rows in (torch.tensor([0, 3]), torch.tensor([1, 2, 4, 5]))]
    assert torch.equal(torch.cat(parts)[torch.tensor([0, 2, 3, 1, 4, 5])], whole)


def test_only_entropy_shaped_has_a_token_term():
    assert {n for n, e in ESTIMATORS.items() if e.token_shaping is not None} == {"entropy_shaped"}
    assert token_shaping("group_relative", AdvantageSettings()) is None


def test_a_broken_entropy_shaping_fails_its_formula(monkeypatch):
    unclipped = lambda a, h, m, s: (a[:, None] + s.entropy_alpha * h).masked_fill(~m, 0.0)  # noqa: E731
    monkeypatch.setitem(
        ESTIMATORS,
        "entropy_shaped",
        dataclasses.replace(ESTIMATORS["entropy_shaped"], token_shaping=unclipped),
    )
    with pytest.raises(AssertionError):
        test_entropy_shaped_token_term_equals_its_formula(0, 0.4, 2.0)


def test_the_defaults_are_the_papers():
    a = AdvantageConfig()
    assert (a.entropy_alpha, a.entropy_kappa) == (0.4, 2.0)


@pytest.mark.usefixtures("hydra_conf")
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("advantage.entropy_kappa=1", "entropy_kappa must be > 1"),
        ("advantage.entropy_alpha=0", "entropy_alpha"),
    ],
)
def test_bad_entropy_parameters_are_refused_at_start_up(override, message):
    from hydra import compose

    from twinkle_exp.config.checks import check_config
    from twinkle_exp.config.store import register_configs

    register_configs()  # the schemas the yaml files extend (as twinkle_exp's entry point does)
    with pytest.raises(ValueError, match=message):
        check_config(compose(config_name="config", overrides=["advantage=entropy_shaped", override]))
