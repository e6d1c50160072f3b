"""One definition per loss: a new loss is one class, and its config option and schema follow it."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from loss_helpers import random_padded_batch

from twinkle_exp.config.store import option_schemas, register_configs
from twinkle_exp.loss import LOSSES, BNPOLoss, LossFn, PolicyGradientLoss, param, register_loss
from twinkle_exp.loss.objectives.clipped import ClippedRatioLoss
from twinkle_exp.loss.params import optional, positive


class DAPOLoss(ClippedRatioLoss):
    """DAPO's loss (Yu et al., 2025) as the seventh: BNPO's token mean with clip-higher by default."""

    name = "dapo_test"
    aggregation = "token_mean"
    clip_range_high: float | None = param(0.28, optional(positive))


@pytest.fixture
def dapo(tmp_path):
    """Registers DAPOLoss (at module level, so Hydra can locate it) and stores its config option."""
    register_loss(DAPOLoss)
    register_configs()
    GlobalHydra.instance().clear()
    try:
        yield DAPOLoss
    finally:
        LOSSES.pop("dapo_test")
        repo = ConfigStore.instance().repo
        for options in (repo["loss"], repo["schema"]["loss"]):
            options.pop("dapo_test.yaml")
        GlobalHydra.instance().clear()


def test_a_new_loss_is_one_class(dapo):
    cls = dapo
    assert LOSSES["dapo_test"] is cls
    schema = option_schemas()["loss"]["dapo_test"]
    defaults = {f.name: f.default for f in dataclasses.fields(schema)}
    assert defaults["clip_range_high"] == 0.28  # the class's default, not restated anywhere
    assert defaults["beta"] == 0.01  # the experiment's KL default, as for the six

    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        cfg = compose("config", overrides=["loss=dapo_test"])
        loss = instantiate(cfg.loss)
        with pytest.raises(Exception, match="tau"):  # a parameter it does not have is refused by name
            compose("config", overrides=["loss=dapo_test", "loss.tau=1"])
    assert type(loss) is cls and loss.clip_range_high == 0.28 and loss.beta == 0.01

    b = random_padded_batch([3, 1, 4], seed=0)
    inputs = {k: b[k] for k in ("logits", "labels", "advantages", "old_logps", "ref_logps")}
    got = loss(**inputs)
    want = BNPOLoss(clip_range_high=0.28, beta=0.01)(**inputs)
    torch.testing.assert_close(got.loss, want.loss)
    assert got.metrics.keys() == want.metrics.keys()


def test_a_loss_without_a_name_or_with_a_taken_name_is_refused():
    with pytest.raises(TypeError, match="name"):

        @register_loss
        class Nameless(PolicyGradientLoss):
            pass

    with pytest.raises(TypeError, match="per_token"):

        @register_loss
        class Aimless(PolicyGradientLoss):
            name = "aimless"

    with pytest.raises(ValueError, match="'grpo' is already registered"):

        @register_loss
        class Again(PolicyGradientLoss):
            name = "grpo"


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_registered_loss_is_a_loss_fn(name):
    assert isinstance(LOSSES[name](), LossFn)


def test_a_callable_without_beta_is_not_a_loss_fn():
    assert not isinstance(lambda **kw: None, LossFn)
