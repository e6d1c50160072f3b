"""The start-up checks by kind: relations live on the schemas, and policies are told apart by the registry."""

from __future__ import annotations

import pytest
from hydra import compose

from twinkle_exp.config.checks import config_problems
from twinkle_exp.config.schema import Config, OptimConfig, RolloutConfig, RolloutCorrectionConfig
from twinkle_exp.config.store import register_configs

register_configs()

pytestmark = pytest.mark.usefixtures("hydra_conf")  # conftest.py: the shipped config tree

MINIBATCHES = "optim.num_minibatches=500: a rollout has only 128 samples"
SAMPLER = "optim.rollout_correction.mode=mis with optim.old_logps=sampler: the correction weighs by"
EMPTY_RANGE = "optim.rollout_correction.low=3 > high=2: the kept range [low, high] is empty"


def problems(*overrides: str) -> list[str]:
    return config_problems(compose(config_name="config", overrides=list(overrides)))


def test_every_broken_relation_is_listed_outermost_schema_first():
    lines = problems(
        "optim.num_minibatches=500",
        "optim.old_logps=sampler",
        "optim.rollout_correction.mode=mis",
        "optim.rollout_correction.low=3",
    )
    assert len(lines) == 3, lines
    assert lines[0].startswith(MINIBATCHES) and lines[1].startswith(SAMPLER) and lines[2] == EMPTY_RANGE


def test_a_schema_refuses_its_broken_relation_with_the_start_up_check_s_line():
    with pytest.raises(ValueError) as empty:
        RolloutCorrectionConfig(mode="mis", low=3.0, high=2.0)
    assert str(empty.value) == EMPTY_RANGE
    with pytest.raises(ValueError, match=f"^{SAMPLER}"):
        OptimConfig(old_logps="sampler", rollout_correction=RolloutCorrectionConfig(mode="mis"))
    assert RolloutCorrectionConfig(mode="tis", low=3.0, high=2.0).low == 3.0  # tis keeps no range
    with pytest.raises(ValueError, match=f"^{MINIBATCHES}"):
        Config(rollout=RolloutConfig(), optim=OptimConfig(num_minibatches=500))


def test_minibatches_of_whole_groups_need_as_many_groups():
    lines = problems(
        "optim.minibatch_split=groups", "optim.num_minibatches=20", "rollout.prompts_per_step=16"
    )
    assert lines == [
        "optim.num_minibatches=20 with optim.minibatch_split=groups: a rollout has only 16 groups "
        "(rollout.prompts_per_step); use at most 16, or minibatch_split=rows"
    ]
    assert (
        problems("optim.minibatch_split=groups", "optim.num_minibatches=16", "rollout.prompts_per_step=16")
        == []
    )
    assert problems("optim.minibatch_split=shards") != []


def test_a_policy_of_the_user_s_own_is_not_taken_for_the_built_in_one_by_its_name():
    # A `_target_` that merely ends like the built-in factory's is the user's: it is neither built at
    # start-up nor held to the built-in tokenizer's character set (its tokenizer is only known once built).
    assert problems("policy._target_=my_package.my_tiny_policy", "task=sort_digits") == []
    # The registered one is built: its own relations are checked.
    assert problems("policy.n_heads=3") == ["ValueError: d_model (128) must be divisible by n_heads (3)"]
