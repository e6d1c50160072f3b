"""The zoo keeps the six's contracts: packed == padded, micro-batches and ranks sum to the full step (loss,
gradient, token-weighted metrics), and on-policy every ratio-based variant is REINFORCE with its normaliser.

Clip-Cov, KL-Cov, the top-entropy mask, BAPO's bound search and M2PO's second-moment mask select tokens by
statistics of the tokens in one call (as verl, TRL and AReaL do per micro-batch), so they are
packing-invariant but not split-invariant; the last test pins that.
"""

from __future__ import annotations

import pytest
import torch
from loss_helpers import ZOO_LOSSES
from loss_zoo_helpers import IGN, zoo_batch

from twinkle_exp.loss import LOSSES
from twinkle_exp.loss import metric_keys as K

LENGTHS = [3, 1, 5, 2, 4, 2]
SWITCHES = {
    "grpo+dual_clip": ("grpo", {"clip_ratio_c": 1.5}),
    "bnpo+delta": ("bnpo", {"delta": 1.4}),
    "grpo+kl_bias": ("grpo", {"kl_bias_correction": True}),
    "gspo+kl_bias": ("gspo", {"kl_bias_correction": True}),
    "cispo+floor": ("cispo", {"weight_floor": True}),
    "grpo+off_policy_mask": ("grpo", {"off_policy_mask_threshold": 0.02}),
    "drgrpo+entropy_bonus": ("drgrpo", {"entropy_coef": 0.05, "max_completion_length": 6}),
    "dapo+top_entropy": ("dapo", {"top_entropy_quantile": 0.5}),
    "topr-token": ("topr", {"ratio_level": "token"}),
    "kimi-token": ("kimi", {"ratio_level": "token"}),
    "dppo_tv-tight": ("dppo_tv", {"clip_range": 0.05, "clip_range_high": 0.08}),
    "dppo_kl-tight": ("dppo_kl", {"clip_range": 0.005, "clip_range_high": 0.01}),
    "clip_cov-wide": ("clip_cov", {"clip_cov_ratio": 0.3, "clip_cov_lb": -1.0, "clip_cov_ub": 1.0}),
    "kl_cov-wide": ("kl_cov", {"kl_cov_ratio": 0.3}),
    "bapo-share": ("bapo", {"positive_share": 0.9}),
    "gppo+dual_clip": ("gppo", {"clip_ratio_c": 1.5}),
}
CONFIGS = {name: (name, {}) for name in ZOO_LOSSES} | SWITCHES
PER_CALL = {
    "clip_cov",
    "kl_cov",
    "clip_cov-wide",
    "kl_cov-wide",
    "dapo+top_entropy",
    "bapo",
    "bapo-share",
    "m2po",
}
SPLITS = [[1, 5], [3, 3], [2, 2, 2], [1, 1, 1, 1, 1, 1]]
KEYS = ("labels", "advantages", "old_logps", "ref_logps", "entropies")


def build(config):
    name, kwargs = CONFIGS[config]
    return LOSSES[name](beta=0.04, **kwargs)


def call(loss_fn, inputs, **extra):
    torch.manual_seed(0)  # Clip-Cov draws its tokens from torch's global RNG
    return loss_fn(**inputs, **extra)


def pack(inputs):
    """Each padded row's real tokens concatenated into one row, position_ids restarting at 0."""
    ends = [int((row != IGN).nonzero().max()) + 1 for row in inputs["labels"]]

    def cat(t):
        return torch.cat([t[i, :e] for i, e in enumerate(ends)])[None]

    packed = {k: cat(inputs[k]) for k in ("labels", "old_logps", "ref_logps", "entropies")}
    packed["logps"] = cat(inputs["logps"].detach()).requires_grad_(True)
    packed["advantages"] = inputs["advantages"]
    packed["position_ids"] = torch.cat([torch.arange(e) for e in ends])[None]
    return packed, ends


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_packed_equals_padded(config):
    inputs, _ = zoo_batch(LENGTHS, seed=20)
    loss_fn = build(config)
    padded = call(loss_fn, inputs)
    packed_inputs, ends = pack(inputs)
    packed = call(loss_fn, packed_inputs)
    torch.testing.assert_close(packed.loss, padded.loss)
    assert packed.metrics.keys() == padded.metrics.keys()
    for key in padded.metrics:
        torch.testing.assert_close(packed.metrics[key], padded.metrics[key], msg=key)
    g_padded = torch.autograd.grad(padded.loss, inputs["logps"])[0]
    g_packed = torch.autograd.grad(packed.loss, packed_inputs["logps"])[0]
    torch.testing.assert_close(g_packed[0], torch.cat([g_padded[i, :e] for i, e in enumerate(ends)]))


def split_calls(loss_fn, inputs, split):
    """The step's loss summed over parts (rows), each given the step's totals; and each part's output."""
    totals = {"num_sequences": len(LENGTHS), "num_tokens": sum(LENGTHS)}
    outs, start = [], 0
    for size in split:
        rows = slice(start, start + size)
        part = {k: inputs[k][rows] for k in KEYS} | {"logps": inputs["logps"][rows]}
        outs.append((call(loss_fn, part, **totals), sum(LENGTHS[rows])))
        start += size
    return outs


@pytest.mark.parametrize("config", sorted(set(CONFIGS) - PER_CALL))
@pytest.mark.parametrize("split", SPLITS)
def test_micro_batches_and_ranks_sum_to_the_full_step(config, split):
    # Two or more ranks are micro-batches whose gradients the all-reduce sums: the same contract.
    inputs, _ = zoo_batch(LENGTHS, seed=21)
    loss_fn = build(config)
    full = call(loss_fn, inputs)
    g_full = torch.autograd.grad(full.loss, inputs["logps"])[0]
    parts = split_calls(loss_fn, inputs, split)
    total = sum(out.loss for out, _ in parts)
    torch.testing.assert_close(total, full.loss)
    torch.testing.assert_close(torch.autograd.grad(total, inputs["logps"])[0], g_full)
    # The trainer's reduction: token-weighted means, the minimum of minima, the maximum of maxima.
    for key, value in full.metrics.items():
        values = [out.metrics[key] for out, _ in parts]
        if key == K.RATIO_MIN:
            got = min(values)
        elif key == K.RATIO_MAX:
            got = max(values)
        elif key == K.POLICY_LOSS:
            got = sum(values)
        else:
            got = sum(v * n for v, (_, n) in zip(values, parts, strict=True)) / sum(LENGTHS)
        torch.testing.assert_close(torch.as_tensor(got), value, msg=key)


def reinforce_normaliser(name: str, seqs) -> list[float]:
    """Per sequence, the weight w_i of -A_i sum_t grad logp_t in the on-policy gradient."""
    g, n = len(seqs), sum(len(s.logp) for s in seqs)
    if name in ("gspo_token", "gmpo"):  # mean over sequences of token means
        return [1 / (g * len(s.logp)) for s in seqs]
    if name in ("luspo", "topr", "kimi"):  # summed per sequence, mean over sequences
        return [1 / g for _ in seqs]
    return [1 / n for _ in seqs]  # token mean over the step


@pytest.mark.parametrize("name", sorted(set(ZOO_LOSSES) - {"clip_cov"}))
def test_on_policy_gradient_is_reinforce(name):
    inputs, seqs = zoo_batch(LENGTHS, seed=22)
    out = LOSSES[name]()(**dict(inputs, old_logps=None))
    (grad,) = torch.autograd.grad(out.loss, inputs["logps"])
    surrogate = -sum(
        w * (s.adv * s.logp).sum() for w, s in zip(reinforce_normaliser(name, seqs), seqs, strict=True)
    )
    (expected,) = torch.autograd.grad(surrogate, inputs["logps"])
    torch.testing.assert_close(grad, expected)
    for key in (K.CLIP_LOW, K.CLIP_HIGH, K.CLIP_REGION):
        assert out.metrics[key].item() == 0.0, key
    assert out.metrics[K.RATIO_MEAN].item() == pytest.approx(1.0)


@pytest.mark.parametrize(
    "config",
    [
        "dapo",
        "gspo_token",
        "luspo",
        "gmpo",
        "kimi",
        "kimi-token",
        "kl_cov-wide",
        "grpo+dual_clip",
        "bnpo+delta",
        "grpo+kl_bias",
        "drgrpo+entropy_bonus",
        "bapo",
        "m2po",
    ],
)
def test_gradcheck_off_policy(config):
    # The differentiable variants (the rest have stop-gradient weights; test_loss_zoo_values checks those).
    inputs, _ = zoo_batch([2, 3], seed=23)
    loss_fn = build(config)
    rest = {k: inputs[k] for k in KEYS}
    entropies = rest.pop("entropies").clone().requires_grad_(True)

    def f(logps, entropies):
        return call(loss_fn, rest | {"logps": logps, "entropies": entropies}).loss

    assert torch.autograd.gradcheck(f, (inputs["logps"], entropies), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("config", ["clip_cov-wide", "kl_cov-wide", "dapo+top_entropy", "bapo-share", "m2po"])
def test_per_call_selection_depends_on_the_split(config):
    # What the module docstring says: selection statistics are the call's, so a split step differs.
    inputs, _ = zoo_batch(LENGTHS, seed=21)
    loss_fn = build(config)
    full = call(loss_fn, inputs)
    total = sum(out.loss for out, _ in split_calls(loss_fn, inputs, [1, 1, 1, 1, 1, 1]))
    g_full = torch.autograd.grad(full.loss, inputs["logps"])[0]
    g_split = torch.autograd.grad(total, inputs["logps"])[0]
    assert not torch.allclose(g_split, g_full)  # (Clip-Cov keeps the detached tokens' values, not gradients)
