"""Property-based tests of the loss library (hypothesis): for any batch a user can build, every variant
and KL estimator returns a finite loss, finite metrics and finite gradients, or raises a ValueError that
names what is wrong.

Batches are drawn at random: shapes, prompt/padding masks, rows without a completion token, packed rows
(several sequences in one row, `position_ids` restarting at 0), log-probs and logits out to +-1e4, zero
advantages, per-sequence or per-token advantages, with or without old and reference log-probs.
Examples are derandomized, so the suite is the same on every run (and in CI); for a longer search set
TWINKLE_HYPOTHESIS_EXAMPLES (e.g. 5000) and TWINKLE_HYPOTHESIS_RANDOM=1.
"""

from __future__ import annotations

import math
import os
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twinkle_exp.loss import KL_ESTIMATORS, LOSSES, completion_mask

IGN = -100
EXTREME = 1e4
PROFILE = settings(
    max_examples=int(os.environ.get("TWINKLE_HYPOTHESIS_EXAMPLES", 300)),
    derandomize=os.environ.get("TWINKLE_HYPOTHESIS_RANDOM") != "1",
    deadline=None,
    database=None,  # nothing written into the checkout
    suppress_health_check=[HealthCheck.too_slow],
)

# A value a log-prob (or logit) can take here: ordinary ones, the extremes, and exact zeros.
values = st.one_of(
    st.floats(-30.0, 0.0, allow_nan=False, width=32),
    st.sampled_from([-EXTREME, EXTREME, 0.0, -1e-8]),
    st.floats(-EXTREME, EXTREME, allow_nan=False, width=32),
)


@st.composite
def losses(draw):
    """Any registered loss with any valid parameters."""
    # GVPO reads each call's groups (`whole_groups`); test_gvpo.py holds its finiteness and refusals.
    name = draw(st.sampled_from(sorted(n for n in LOSSES if not LOSSES[n].whole_groups)))
    params = {
        "clip_range": draw(st.sampled_from([1e-4, 0.2, 0.9])),
        "clip_range_high": draw(st.sampled_from([None, 3e-4, 0.28, 5.0])),
        "beta": draw(st.sampled_from([0.0, 0.04, 1.0])),
        "kl_estimator": draw(st.sampled_from(KL_ESTIMATORS)),
    }
    if name == "sapo":
        params |= {
            "tau": draw(st.sampled_from([0.1, 1.0, 10.0])),
            "tau_neg": draw(st.sampled_from([None, 1.05])),
        }
    if name == "drgrpo":
        params["max_completion_length"] = draw(st.sampled_from([None, 1, 64]))
    return LOSSES[name](**params)


@st.composite
def batches(draw):
    """Keyword inputs of a loss call: padded or packed, log-probs or logits, optional old/ref log-probs."""
    packed = draw(st.booleans())
    rows = 1 if packed else draw(st.integers(1, 4))
    width = draw(st.integers(1, 10))
    # Per token: a completion token (labelled) or not (prompt, padding); whole rows may hold none.
    labelled = draw(
        st.lists(st.lists(st.booleans(), min_size=width, max_size=width), min_size=rows, max_size=rows)
    )
    vocab = draw(st.integers(2, 6))
    labels = torch.tensor(
        [[draw(st.integers(0, vocab - 1)) if on else IGN for on in row] for row in labelled], dtype=torch.long
    )
    inputs: dict = {"labels": labels}
    if packed:  # restart positions at each sequence start (always at 0)
        starts = [0] + [t for t in range(1, width) if draw(st.booleans())]
        positions = [t - max(s for s in starts if s <= t) for t in range(width)]
        inputs["position_ids"] = torch.tensor([positions])
        num_seqs = len(starts)
    else:
        num_seqs = rows

    def tensor(shape):
        return torch.tensor(
            draw(st.lists(values, min_size=math.prod(shape), max_size=math.prod(shape)))
        ).reshape(shape)

    if draw(st.booleans()):
        inputs["logits"] = tensor((rows, width, vocab)).requires_grad_(True)
    else:
        inputs["logps"] = tensor((rows, width)).requires_grad_(True)
    if draw(st.booleans()):
        inputs["old_logps"] = tensor((rows, width))
    if draw(st.booleans()):
        inputs["ref_logps"] = tensor((rows, width))
    kind = draw(st.sampled_from(["sequence", "token", "zero"]))
    if kind == "zero":
        inputs["advantages"] = torch.zeros(num_seqs)
    else:
        shape = (num_seqs,) if kind == "sequence" else (rows, width)
        inputs["advantages"] = torch.tensor(
            draw(st.lists(st.floats(-10, 10, width=32), min_size=math.prod(shape), max_size=math.prod(shape)))
        ).reshape(shape)
    return inputs


def _leaf(inputs: dict) -> torch.Tensor:
    return inputs["logits"] if "logits" in inputs else inputs["logps"]


@PROFILE
@given(loss=losses(), inputs=batches())
def test_every_loss_is_finite_with_finite_gradients_or_names_the_problem(loss, inputs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "the batch has no completion tokens"
        if loss.beta > 0 and "ref_logps" not in inputs:
            with pytest.raises(ValueError, match="needs ref_logps"):
                loss(**inputs)
            return
        out = loss(**inputs)
    assert out.loss.dim() == 0 and torch.isfinite(out.loss), f"{loss}: loss {out.loss}"
    bad = {k: float(v) for k, v in out.metrics.items() if not torch.isfinite(v)}
    assert not bad, f"{loss}: non-finite metrics {bad}"
    out.loss.backward()
    grad = _leaf(inputs).grad
    assert grad is not None and torch.isfinite(grad).all(), f"{loss}: non-finite gradient {grad}"


# --- inputs that are wrong: a ValueError that names the argument ---------------------------------------
def _break_advantages(inputs, draw):
    # More entries than tokens: never the batch's number of sequences (B + 7 could be, for packed rows).
    inputs["advantages"] = torch.zeros(inputs["labels"].numel() + 7)
    return "advantages"


def _break_old_logps(inputs, draw):
    inputs["old_logps"] = torch.zeros(inputs["labels"].shape[0], inputs["labels"].shape[1] + 1)
    return "old_logps"


def _break_ref_logps(inputs, draw):
    inputs["ref_logps"] = torch.zeros(inputs["labels"].shape[0] + 1, inputs["labels"].shape[1])
    return "ref_logps"


def _break_position_ids(inputs, draw):
    positions = torch.arange(inputs["labels"].shape[1]).expand_as(inputs["labels"]) + 1
    inputs["position_ids"] = positions.contiguous()
    return "position_ids"


def _break_labels(inputs, draw):
    inputs["labels"] = inputs["labels"].reshape(-1)
    return "labels"


def _break_both_inputs(inputs, draw):
    leaf = _leaf(inputs)
    inputs["logps"] = leaf if leaf.dim() == 2 else leaf[..., 0]
    inputs["logits"] = leaf[..., None] if leaf.dim() == 2 else leaf
    return "exactly one of logits"


BREAKS = [_break_advantages, _break_old_logps, _break_ref_logps, _break_position_ids, _break_labels]
BREAKS.append(_break_both_inputs)


@PROFILE
@given(loss=losses(), inputs=batches(), data=st.data())
def test_a_malformed_batch_is_a_value_error_naming_the_argument(loss, inputs, data):
    named = data.draw(st.sampled_from(BREAKS))(inputs, data.draw)
    inputs.setdefault("ref_logps", torch.zeros_like(inputs["labels"], dtype=torch.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError, match=named):
            loss(**inputs)


@PROFILE
@given(loss=losses(), inputs=batches())
def test_step_totals_smaller_than_the_batch_are_refused(loss, inputs):
    inputs.setdefault("ref_logps", torch.zeros_like(inputs["labels"], dtype=torch.float32))
    with pytest.raises(ValueError, match="num_sequences=0 is smaller than the"):
        loss(**inputs, num_sequences=0)
    if completion_mask(inputs["labels"], inputs.get("position_ids")).any():
        with pytest.raises(ValueError, match="num_tokens=0 is smaller than the"):
            loss(**inputs, num_tokens=0)


def test_a_missing_reference_is_refused_even_for_a_batch_without_completion_tokens():
    # Found by the property above: the empty-batch shortcut used to return 0 before checking.
    labels = torch.tensor([[IGN, IGN]])
    with pytest.raises(ValueError, match="beta=0.04 > 0 needs ref_logps"):
        LOSSES["grpo"](beta=0.04)(logps=torch.zeros(1, 2), labels=labels, advantages=torch.zeros(1))
