"""The property tests of test_loss_properties.py extended to the zoo's variants, their own parameters and
every switch: for any batch, a finite loss, finite metrics and finite gradients, or a ValueError naming what
is wrong (same batch strategy, same derandomized profile)."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_loss_properties import PROFILE, _leaf, batches

from twinkle_exp.loss import KL_ESTIMATORS, LOSSES

# Per loss, its own parameters and the values drawn for them (the defaults always among them).
OWN = {
    "clip_cov": {"clip_cov_ratio": [2e-4, 0.5, 1.0], "clip_cov_lb": [-1e9, 1.0], "clip_cov_ub": [5.0, 1e9]},
    "kl_cov": {"kl_cov_ratio": [2e-4, 1.0], "kl_cov_coef": [0.0, 1.0, 100.0]},
    "vespo": {
        "k_pos": [0.0, 2.0, 10.0],
        "lambda_pos": [1e-3, 3.0],
        "k_neg": [3.0],
        "lambda_neg": [2.0, 50.0],
    },
    "dppo_tv": {"ratio_cap": [None, 1.0, 20.0]},
    "dppo_kl": {"ratio_cap": [None, 20.0]},
    "topr": {"ratio_level": ["sequence", "token"]},
    "kimi": {"tau": [1e-3, 0.1, 10.0], "ratio_level": ["sequence", "token"]},
    "cispo": {"weight_floor": [False, True]},
}
CLIPPED = {"grpo", "gspo", "bnpo", "drgrpo", "dapo", "gspo_token", "luspo"}  # objective "clip"


@st.composite
def zoo_losses(draw):
    """Any registered loss with any valid parameters, switches included."""
    # GVPO reads each call's groups (`whole_groups`); test_gvpo.py holds its finiteness and refusals.
    name = draw(st.sampled_from(sorted(n for n in LOSSES if not LOSSES[n].whole_groups)))
    params = {
        "clip_range": draw(st.sampled_from([1e-4, 0.2, 0.9])),
        "clip_range_high": draw(st.sampled_from([None, 3e-4, 0.28, 5.0])),
        "beta": draw(st.sampled_from([0.0, 0.04, 1.0])),
        "kl_estimator": draw(st.sampled_from(KL_ESTIMATORS)),
        "kl_bias_correction": draw(st.booleans()),
        "off_policy_mask_threshold": draw(st.sampled_from([None, -1.0, 0.0, 0.5])),
        "top_entropy_quantile": draw(st.sampled_from([1.0, 0.2, 1e-3])),
        "entropy_coef": draw(st.sampled_from([0.0, 0.01, -1.0])),
    }
    if name in CLIPPED:
        params["clip_ratio_c"] = draw(st.sampled_from([None, 1.0001, 3.0]))
        params["delta"] = draw(st.sampled_from([None, 1.0001, 4.0]))
    for key, choices in OWN.get(name, {}).items():
        params[key] = draw(st.sampled_from(choices))
    if name == "drgrpo":
        params["max_completion_length"] = draw(st.sampled_from([None, 1, 64]))
    return LOSSES[name](**params)


@PROFILE
@given(loss=zoo_losses(), inputs=batches(), data=st.data())
def test_every_variant_and_switch_is_finite_or_names_the_problem(loss, inputs, data):
    if data.draw(st.booleans()):  # an entropy per token, sometimes with gradient
        shape = inputs["labels"].shape
        entropies = torch.tensor(
            data.draw(
                st.lists(st.floats(0.0, 20.0, width=32), min_size=shape.numel(), max_size=shape.numel())
            )
        )
        inputs["entropies"] = entropies.reshape(shape).requires_grad_(data.draw(st.booleans()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "the batch has no completion tokens"
        if loss.beta > 0 and "ref_logps" not in inputs:
            with pytest.raises(ValueError, match="needs ref_logps"):
                loss(**inputs)
            return
        if loss.spec.needs_entropy and "entropies" not in inputs and "logits" not in inputs:
            with pytest.raises(ValueError, match="needs entropies"):
                loss(**inputs)
            return
        torch.manual_seed(0)
        out = loss(**inputs)
    assert out.loss.dim() == 0 and torch.isfinite(out.loss), f"{loss}: loss {out.loss}"
    bad = {k: float(v) for k, v in out.metrics.items() if not torch.isfinite(v)}
    assert not bad, f"{loss}: non-finite metrics {bad}"
    out.loss.backward()
    grad = _leaf(inputs).grad
    assert grad is not None and torch.isfinite(grad).all(), f"{loss}: non-finite gradient {grad}"


@pytest.mark.parametrize(
    "name,kwargs,match",
    [
        ("grpo", {"clip_ratio_c": 1.0}, "clip_ratio_c must be > 1"),
        ("grpo", {"delta": 0.5}, "delta must be > 1"),
        ("sapo", {"clip_ratio_c": 3.0}, "clip_ratio_c applies to the PPO-clipped objective only"),
        ("cispo", {"delta": 2.0}, "delta applies to the PPO-clipped objective only"),
        ("grpo", {"kl_bias_correction": 1}, "kl_bias_correction must be true or false"),
        ("grpo", {"top_entropy_quantile": 0.0}, "top_entropy_quantile must be in"),
        ("grpo", {"top_entropy_quantile": 1.5}, "top_entropy_quantile must be in"),
        ("grpo", {"entropy_coef": float("nan")}, "entropy_coef must be a finite number"),
        ("grpo", {"off_policy_mask_threshold": "x"}, "off_policy_mask_threshold"),
        ("clip_cov", {"clip_cov_lb": 5.0, "clip_cov_ub": 1.0}, "clip_cov_lb"),
        ("clip_cov", {"clip_cov_ratio": 0.0}, "clip_cov_ratio must be in"),
        ("kl_cov", {"kl_cov_coef": -1.0}, "kl_cov_coef must be >= 0"),
        ("vespo", {"lambda_neg": 0.0}, "lambda_neg must be > 0"),
        ("dppo_tv", {"ratio_cap": 0.0}, "ratio_cap must be > 0"),
        ("topr", {"ratio_level": "batch"}, "ratio_level must be one of"),
        ("kimi", {"tau": -1.0}, "tau must be > 0"),
        ("gpg", {"tau": 1.0}, "unknown parameter"),
        ("cispo", {"weight_floor": "yes"}, "weight_floor must be true or false"),
    ],
)
def test_bad_parameters_name_themselves(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        LOSSES[name](**kwargs)


def test_entropy_switches_without_entropies_are_refused():
    labels = torch.tensor([[-100, 1, 2]])
    with pytest.raises(ValueError, match="needs entropies"):
        LOSSES["grpo"](entropy_coef=0.1)(logps=torch.zeros(1, 3), labels=labels, advantages=torch.ones(1))
