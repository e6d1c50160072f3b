"""Bad input is refused with a ValueError that names the parameter or tensor."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from loss_helpers import ALL_LOSSES, IGN, make_loss, random_padded_batch

from twinkle_exp.loss import GRPOLoss, SAPOLoss, get_loss_class


@pytest.mark.parametrize(
    "cls,kwargs,match",
    [
        (SAPOLoss, {"tau": 0.5, "bogus": 1}, "bogus"),
        (GRPOLoss, {"tau": 0.5}, "tau"),  # a parameter of another loss
        (GRPOLoss, {"clip_range": 0}, "clip_range must be > 0"),
        (GRPOLoss, {"clip_range": -0.1}, "clip_range"),
        (GRPOLoss, {"clip_range": "abc"}, "clip_range must be a finite number"),
        (GRPOLoss, {"clip_range": math.nan}, "clip_range"),
        (GRPOLoss, {"clip_range_high": 0}, "clip_range_high"),
        (GRPOLoss, {"beta": -0.01}, "beta must be >= 0"),
        (GRPOLoss, {"kl_estimator": "k4"}, "kl_estimator"),
        (SAPOLoss, {"tau": -1}, "tau must be > 0, got -1"),
        (SAPOLoss, {"tau": 0}, "tau must be > 0"),
        (SAPOLoss, {"tau_neg": 0}, "tau_neg"),
        (SAPOLoss, {"tau_pos": True}, "tau_pos"),
        (get_loss_class("drgrpo"), {"max_completion_length": 0}, "max_completion_length"),
    ],
)
def test_bad_parameters(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_unknown_loss_name():
    with pytest.raises(ValueError, match="unknown loss 'nope'"):
        get_loss_class("nope")


def call(b, loss_fn=None, **overrides):
    kwargs = {k: b[k] for k in ("logits", "labels", "advantages", "old_logps", "ref_logps")} | overrides
    return (loss_fn or GRPOLoss(beta=0.1))(**kwargs)


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"logits": torch.zeros(2, 3, 11)}, "logits has shape"),
        ({"labels": torch.zeros(2, 3, dtype=torch.long)}, "shape"),
        ({"labels": torch.zeros(2, 7)}, "integer token ids"),
        ({"old_logps": torch.zeros(2, 3)}, "old_logps has shape"),
        ({"ref_logps": torch.zeros(2, 3)}, "ref_logps has shape"),
        ({"advantages": torch.zeros(3)}, "advantages has 3 entries but the batch holds 2 sequences"),
        ({"advantages": torch.zeros(2, 3)}, "advantages has shape"),
        ({"ref_logps": None}, "needs ref_logps"),
        ({"position_ids": torch.tensor([[1, 0, 1, 2, 3, 4, 5]] * 2)}, "position_ids must start at 0"),
        ({"logps": torch.zeros(2, 7)}, "exactly one of logits"),
        ({"num_sequences": 1}, "num_sequences=1 is smaller"),
        ({"num_tokens": 1}, "num_tokens=1 is smaller"),
    ],
)
def test_bad_tensors(overrides, match):
    b = random_padded_batch([3, 5])
    with pytest.raises(ValueError, match=match):
        call(b, **overrides)


def test_label_outside_vocabulary():
    b = random_padded_batch([3, 5])
    b["labels"][0, 2] = 99
    with pytest.raises(ValueError, match="outside the vocabulary"):
        call(b)


@pytest.mark.parametrize("name", ALL_LOSSES)
def test_no_completion_tokens_gives_zero_loss_with_graph(name):
    b = random_padded_batch([3, 5])
    labels = torch.full_like(b["labels"], IGN)
    with pytest.warns(RuntimeWarning, match="no completion tokens"):
        out = call(b, make_loss(name, beta=0.1), labels=labels)
    assert out.loss.item() == 0.0 and out.loss.requires_grad
    out.loss.backward()
    assert b["logits"].grad.abs().sum() == 0
    assert all(not torch.isnan(v) for v in out.metrics.values())


def test_valid_batch_does_not_warn():
    b = random_padded_batch([3, 5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        call(b)
