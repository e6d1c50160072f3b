"""The advantage estimators against their formulas, written out here per completion in Python floats.

The references follow verl's per-sample loops (verl/trainer/ppo/core_algos.py at b178a3cd: rloo 476-525,
opo 528-579, reinforce_plus_plus 582-618 with verl/utils/torch_functional.py masked_whiten 322-339,
reinforce_plus_plus_baseline 422-473, grpo_passk 360-419) and the PSR/NSR/W-REINFORCE authors' code
(TianHongZXY/RLVR-Decomposed at a5d4e7c1, verl/trainer/ppo/core_algos.py 111-153), transcribed, not imported:
neither is installable here.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from twinkle_exp.loss.advantages import ESTIMATORS, AdvantageSettings, estimate

G = 4


def batch(seed: int, groups: int = 5, binary: bool = False) -> tuple[list[float], list[int]]:
    rng = random.Random(seed)
    rewards = [
        float(rng.random() < 0.5) if binary else round(rng.uniform(-1, 2), 3) for _ in range(groups * G)
    ]
    if not binary:
        rewards[G : 2 * G] = [0.7] * G  # one group of equal rewards
    lengths = [rng.randint(1, 12) for _ in range(groups * G)]
    return rewards, lengths


def groups_of(values: list) -> list[list]:
    return [values[i : i + G] for i in range(0, len(values), G)]


def ref_rloo(r, lens, s):
    out = []
    for g in groups_of(r):
        mean = sum(g) / G
        out += [x * G / (G - 1) - mean * G / (G - 1) for x in g]
    return out


def ref_opo(r, lens, s):
    out = []
    for g, lg in zip(groups_of(r), groups_of(lens), strict=True):
        baseline = sum(a * b for a, b in zip(g, lg, strict=True)) / sum(lg)
        out += [x - baseline for x in g]
    return out


def _whiten_tokens(values, lens):
    """verl masked_whiten over a [bs, T] tile whose row i holds values[i] on its first lens[i] tokens."""
    tokens = [v for v, n in zip(values, lens, strict=True) for _ in range(n)]
    mean = sum(tokens) / len(tokens)
    var = sum((t - mean) ** 2 for t in tokens) / len(tokens) * len(tokens) / (len(tokens) - 1)
    return [(v - mean) / math.sqrt(var + 1e-8) for v in values]


def ref_reinforce_pp(r, lens, s):
    return _whiten_tokens(r, lens)


def ref_reinforce_pp_baseline(r, lens, s):
    centered = []
    for g in groups_of(r):
        mean = sum(g) / G
        centered += [x - mean for x in g]
    return _whiten_tokens(centered, lens)


def ref_passk(r, lens, s):
    out = []
    for g in groups_of(r):
        order = sorted(range(G), key=lambda i: -g[i])
        adv = [0.0] * G
        gap = g[order[0]] - g[order[1]]
        if s.scale == "group":
            mean = sum(g) / G
            gap /= math.sqrt(sum((x - mean) ** 2 for x in g) / (G - 1)) + s.eps
        adv[order[0]] = gap
        out += adv
    return out


def ref_psr(r, lens, s):
    return [x if x == 1 else 0.0 for x in r]  # the authors keep only correct samples, whose return is r = 1


def ref_nsr(r, lens, s):
    return [x - 1 if x == 0 else 0.0 for x in r]


def ref_w_reinforce(r, lens, s):
    return [x * s.positive_weight if x == 1 else x - 1 if x == 0 else x for x in r]


REFERENCES = {
    "rloo": ref_rloo,
    "opo": ref_opo,
    "reinforce_pp": ref_reinforce_pp,
    "reinforce_pp_baseline": ref_reinforce_pp_baseline,
    "passk": ref_passk,
    "psr": ref_psr,
    "nsr": ref_nsr,
    "w_reinforce": ref_w_reinforce,
}
BINARY = {"psr", "nsr", "w_reinforce", "passk"}


# Tested in tests/test_advantage_greedy_and_entropy.py: they take more than the rewards and lengths.
ELSEWHERE = {"remax", "entropy_shaped"}


def test_every_estimator_but_the_group_relative_one_has_a_reference():
    assert set(ESTIMATORS) == set(REFERENCES) | {"group_relative"} | ELSEWHERE


@pytest.mark.parametrize("name", sorted(REFERENCES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimator_equals_its_reference(name, seed):
    rewards, lengths = batch(seed, binary=name in BINARY)
    settings = AdvantageSettings(positive_weight=0.1)
    got = estimate(name, torch.tensor(rewards), G, torch.tensor(lengths), settings).advantages
    want = REFERENCES[name](rewards, lengths, settings)
    est = ESTIMATORS[name]
    for i, g in enumerate(groups_of(rewards)):  # a group of equal rewards: exactly 0 with a group baseline
        if est.group_baseline and len(set(g)) == 1:
            want[i * G : (i + 1) * G] = [0.0] * G
    assert got.dtype == torch.float32
    assert got.tolist() == pytest.approx(want, rel=1e-6, abs=1e-6)


def test_passk_unscaled_is_the_raw_gap():
    got = estimate("passk", torch.tensor([0.0, 1.0, 0.25, 0.5]), 4, settings=AdvantageSettings(scale="none"))
    assert got.advantages.tolist() == [0.0, 0.5, 0.0, 0.0]


def test_w_reinforce_weights_correct_samples_by_lambda():
    got = estimate(
        "w_reinforce", torch.tensor([1.0, 0.0, 0.5, 1.0]), 2, settings=AdvantageSettings(positive_weight=0.25)
    )
    assert got.advantages.tolist() == [0.25, -1.0, 0.5, 0.25]


def test_reinforce_pp_weighs_completions_by_their_tokens():
    # one token at reward 1, three at reward 0: token mean 0.25, unbiased token var 0.25
    got = estimate("reinforce_pp", torch.tensor([1.0, 0.0]), 2, torch.tensor([1, 3])).advantages
    assert got.tolist() == pytest.approx([0.75 / math.sqrt(0.25 + 1e-8), -0.25 / math.sqrt(0.25 + 1e-8)])


def test_the_batch_level_estimator_is_invariant_to_how_the_batch_is_split_into_ranks():
    rewards, lengths = batch(3)
    whole = estimate("reinforce_pp", torch.tensor(rewards), G, torch.tensor(lengths)).advantages
    # Ranks gather rewards before estimating: the same tensor in another order of groups gives the same values.
    perm = [2, 0, 4, 1, 3]
    shuffled = [x for g in perm for x in groups_of(rewards)[g]]
    shuffled_lens = [x for g in perm for x in groups_of(lengths)[g]]
    again = estimate("reinforce_pp", torch.tensor(shuffled), G, torch.tensor(shuffled_lens)).advantages
    assert again.tolist() == pytest.approx([x for g in perm for x in groups_of(whole.tolist())[g]], rel=1e-12)


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("nope", {}, "unknown advantage estimator 'nope'"),
        ("rloo", {"group_size": 1}, "rloo needs group_size >= 2"),
        ("rloo", {"scale": "batch"}, "rloo takes scale group, got 'batch'"),
        ("passk", {"scale": "batch"}, "passk takes scale group or none"),
    ],
)
def test_bad_settings_are_refused_by_name(name, kwargs, message):
    size = kwargs.pop("group_size", 2)
    with pytest.raises(ValueError, match=message):
        estimate(name, torch.tensor([1.0, 0.0, 0.5, 0.5]), size, settings=AdvantageSettings(**kwargs))


def test_a_broken_estimator_fails_its_reference(monkeypatch):
    from twinkle_exp.loss.advantages import registry

    broken = registry.Estimator(
        **{**vars(ESTIMATORS["rloo"]), "fn": lambda r, lens, s: r - r.mean(dim=1, keepdim=True)}
    )
    monkeypatch.setitem(ESTIMATORS, "rloo", broken)  # GRPO's unscaled centring, missing G / (G - 1)
    with pytest.raises(AssertionError):
        test_estimator_equals_its_reference("rloo", 0)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(ESTIMATORS) - {"group_relative"}))
def test_every_estimator_trains_from_the_command_line(name, run_cli, tmp_path):
    import csv

    proc = run_cli(f"advantage={name}", "debug=fast", "logger=csv", "trainer.max_steps=4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (metrics,) = tmp_path.glob("outputs/*/*/metrics.csv")
    with open(metrics, newline="") as f:
        rows = list(csv.DictReader(f))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses)


def test_a_scale_the_estimator_does_not_define_is_refused_at_start_up(run_cli):
    proc = run_cli("advantage=rloo", "advantage.scale=batch", "debug=fast")
    assert proc.returncode == 2
    assert "advantage.scale=batch: advantage.estimator=rloo takes group" in proc.stderr
