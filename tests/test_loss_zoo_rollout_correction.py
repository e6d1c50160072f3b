"""The rollout-mismatch correction (loss/rollout_correction.py) in float64: each mode's weights and metrics
against the formula written out per token / per sequence, packing, and how the loss consumes the weights."""

from __future__ import annotations

import math

import pytest
import torch
from loss_zoo_helpers import IGN, zoo_batch

from twinkle_exp.loss import LOSSES, ROLLOUT_MODES, completion_mask
from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss.rollout_correction import rollout_correction

LENGTHS = [3, 1, 5, 2]


def mismatch(seed=0, scale=0.3):
    """(sampler, old) log-probs `[B, T]` and the mask; the sampler off by `scale` noise per token."""
    inputs, _ = zoo_batch(LENGTHS, seed=seed)
    mask = completion_mask(inputs["labels"])
    gen = torch.Generator().manual_seed(seed + 100)
    old = inputs["old_logps"]
    sampler = (old + scale * torch.randn(old.shape, generator=gen, dtype=torch.float64)) * mask
    return sampler, old, mask


def per_token(sampler, old, mask):
    """[(sequence index, rho)] for every completion token, rho = pi_old / pi_sampler, sequences in order."""
    out = []
    for i in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if mask[i, t]:
                out.append((i, math.exp(float(old[i, t] - sampler[i, t]))))
    return out


def expected(mode, level, sampler, old, mask, upper=2.0, low=0.5, high=2.0):
    """(weights per completion token in order, the ratio each mode acts on) from the formulas."""
    tokens = per_token(sampler, old, mask)
    seq_logs = {}
    for i, rho in tokens:
        seq_logs.setdefault(i, []).append(math.log(rho))
    weights, acted = [], []
    for i, rho in tokens:
        if mode == "seq_mask":
            r = math.exp(sum(seq_logs[i]) / len(seq_logs[i]))
            w = float(low <= r <= high)
        elif mode == "tis":
            r = math.exp(sum(seq_logs[i])) if level == "sequence" else rho
            w = min(r, upper)
        elif mode == "mis":
            r = rho
            w = rho if low <= rho <= high else 0.0
        else:
            r, w = rho, 1.0
        weights.append(w)
        acted.append(r)
    return weights, acted


CASES = [("none", "token"), ("tis", "token"), ("tis", "sequence"), ("mis", "token"), ("seq_mask", "token")]


@pytest.mark.parametrize("mode,level", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_weights_and_metrics_match_the_formulas(mode, level, seed):
    sampler, old, mask = mismatch(seed, scale=0.6)
    kwargs = {"upper": 1.5, "low": 0.7, "high": 1.4}
    weights, metrics = rollout_correction(sampler, old, mask, mode=mode, level=level, **kwargs)
    want, acted = expected(mode, level, sampler, old, mask, **kwargs)
    assert weights[mask].tolist() == pytest.approx(want, rel=1e-12)
    assert (weights[~mask] == 0).all() and not weights.requires_grad
    assert metrics[K.ROLLOUT_RATIO_MEAN].item() == pytest.approx(sum(acted) / len(acted), rel=1e-6)
    assert metrics[K.ROLLOUT_RATIO_MIN].item() == pytest.approx(min(acted), rel=1e-6)
    assert metrics[K.ROLLOUT_RATIO_MAX].item() == pytest.approx(max(acted), rel=1e-6)
    assert metrics[K.ROLLOUT_MASKED].item() == pytest.approx(sum(w == 0 for w in want) / len(want))
    assert set(metrics) == set(K.ROLLOUT)


def test_the_cases_exercise_every_branch():
    sampler, old, mask = mismatch(0, scale=0.6)
    rhos = [r for _, r in per_token(sampler, old, mask)]
    assert min(rhos) < 0.7 and max(rhos) > 1.5  # below MIS's low, above TIS's upper and MIS's high
    _, metrics = rollout_correction(sampler, old, mask, mode="seq_mask", low=0.7, high=1.4)
    assert 0 < metrics[K.ROLLOUT_MASKED].item() < 1


def test_no_mismatch_gives_unit_weights():
    _, old, mask = mismatch(0)
    for mode, level in CASES:
        weights, metrics = rollout_correction(old, old, mask, mode=mode, level=level)
        assert weights[mask].tolist() == [1.0] * int(mask.sum())
        assert metrics[K.ROLLOUT_MASKED].item() == 0.0


@pytest.mark.parametrize("mode,level", CASES)
def test_packed_equals_padded(mode, level):
    sampler, old, mask = mismatch(2, scale=0.6)
    ends = [int(row.nonzero().max()) + 1 for row in mask]

    def cat(t):
        return torch.cat([t[i, :e] for i, e in enumerate(ends)])[None]

    pos = torch.cat([torch.arange(e) for e in ends])[None]
    labels = cat(torch.where(mask, 1, IGN))
    packed_mask = completion_mask(labels, pos)
    w_pad, m_pad = rollout_correction(sampler, old, mask, mode=mode, level=level, low=0.7, high=1.4)
    w_pack, m_pack = rollout_correction(
        cat(sampler), cat(old), packed_mask, mode=mode, level=level, low=0.7, high=1.4, position_ids=pos
    )
    torch.testing.assert_close(w_pack, cat(w_pad))
    for key in m_pad:
        torch.testing.assert_close(m_pack[key], m_pad[key], msg=key)


@pytest.mark.parametrize("name", ["grpo", "cispo", "gspo", "dapo", "vespo", "kimi"])
def test_the_loss_multiplies_its_policy_term_by_the_weights(name):
    inputs, _ = zoo_batch(LENGTHS, seed=3)
    mask = completion_mask(inputs["labels"])
    gen = torch.Generator().manual_seed(9)
    weights = torch.rand(mask.shape, generator=gen, dtype=torch.float64) * 2 * mask
    # VESPO's default folds the weights into its phi (tests/test_peer_forms.py); its per-token form here.
    own = {"fold_rollout_weights": False} if name == "vespo" else {}
    loss_fn = LOSSES[name](beta=0.1, **own)
    weighted = loss_fn(**inputs, rollout_weights=weights)
    # The same policy term with the weight folded into the advantage (every objective is linear in A per
    # token except through its sign, and weights >= 0 keep the sign), the KL term unweighted.
    plain_policy = LOSSES[name](beta=0.0, **own)(
        **dict(inputs, advantages=_token_adv(inputs, mask) * weights)
    )
    kl_only = LOSSES[name](beta=0.1, **own)(**dict(inputs, advantages=torch.zeros_like(weights)))
    if name in ("grpo", "cispo", "dapo", "gspo"):
        torch.testing.assert_close(weighted.loss, plain_policy.loss + kl_only.loss)
    torch.testing.assert_close(weighted.metrics[K.POLICY_LOSS], _policy_loss(loss_fn, inputs, weights))


def _token_adv(inputs, mask):
    return inputs["advantages"][:, None].expand(mask.shape) * mask


def _policy_loss(loss_fn, inputs, weights):
    """The policy loss recomputed with the per-token policy term times the weights, by hand."""
    from twinkle_exp.loss.batch import prepare_batch
    from twinkle_exp.loss.core import _aggregate, _importance_weight

    spec = loss_fn.spec
    b = prepare_batch(**{k: v for k, v in inputs.items() if k != "entropies"})
    per_token, _ = loss_fn.per_token(spec, b, _importance_weight(spec, b))
    return _aggregate(spec, b, per_token * weights, b.num_seqs, b.num_tokens).detach().float()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"mode": "icepop"}, "mode must be one of"),
        ({"level": "batch"}, "level must be one of"),
        ({"upper": 0.0}, "upper must be > 0"),
        ({"low": 2.0, "high": 1.0}, "0 <= low <= high"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, match):
    sampler, old, mask = mismatch(0)
    with pytest.raises(ValueError, match=match):
        rollout_correction(sampler, old, mask, **kwargs)


def test_shapes_are_checked():
    sampler, old, mask = mismatch(0)
    with pytest.raises(ValueError, match="sampler_logps has shape"):
        rollout_correction(sampler[:, 1:], old, mask)
    assert ROLLOUT_MODES == ("none", "tis", "mis", "seq_mask")
