"""The losses of 2025 (BAPO, GPPO, CE-GPPO, ASPO, M2PO) against their formulas, written out here token by token
in float64 with plain Python numbers: the loss, its gradient with respect to the log-probs (each formula's own
gradient, since GPPO and ASPO are defined by a gradient that is not their value's), and their metrics. Then
their presets, their place in the registry and the zoo sweep, and a `debug=fast` run of each."""

from __future__ import annotations

import json
import math

import pytest
import torch
from loss_zoo_helpers import PROMPT, zoo_batch

from twinkle_exp.loss import LOSSES
from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss.objectives.aspo import ASPO_DUAL
from twinkle_exp.loss.objectives.bapo import BAPO_HIGH, BAPO_LOW, BAPO_SHARE
from twinkle_exp.loss.objectives.clipped import DUAL_CLIP
from twinkle_exp.loss.objectives.m2po import M2PO_M2, M2PO_MASKED

NEW = ["aspo", "bapo", "ce_gppo", "gppo", "m2po"]
LENGTHS = [3, 1, 5, 2, 4, 6]


def tokens(seqs):
    """Every completion token as plain floats: (sequence, position, logp, old, A)."""
    out = []
    for i, s in enumerate(seqs):
        for t in range(len(s.logp)):
            out.append((i, t, float(s.logp[t]), float(s.old[t]), float(s.adv[t])))
    return out


def expected_grad(seqs, like, grads):
    """`[B, T]` gradient from per-token values `grads[(i, t)]` (the completion starts at PROMPT)."""
    g = torch.zeros_like(like)
    for (i, t), value in grads.items():
        g[i, PROMPT + t] = value
    return g


# --- references: (seqs) -> (loss value, {(i, t): d loss / d logp_it}, {metric: value}) -------------------
def ref_gppo(seqs, lo=0.2, hi=0.28, beta1=1.0, beta2=1.0, c=None):
    toks = tokens(seqs)
    n = len(toks)
    value, grads, low, high, dual_n = 0.0, {}, 0, 0, 0
    for i, t, lp, old, a in toks:
        r = math.exp(lp - old)
        if a < 0 and r < 1 - lo:  # clipped below: the bound's value, slope beta1 (1 - lo)
            loss, w = -beta1 * (1 - lo) * a, beta1 * (1 - lo)
            low += 1
        elif a > 0 and r > 1 + hi:  # clipped above
            loss, w = -beta2 * (1 + hi) * a, beta2 * (1 + hi)
            high += 1
        else:
            loss, w = -r * a, r
        if c is not None and a < 0 and loss > -c * a:  # dual clip: a constant, no gradient
            loss, w = -c * a, 0.0
            dual_n += 1
        value += loss / n
        grads[(i, t)] = -a * w / n
    metrics = {K.CLIP_LOW: low / n, K.CLIP_HIGH: high / n}
    if c is not None:
        metrics[DUAL_CLIP] = dual_n / n
    return value, grads, metrics


def ref_aspo(seqs, lo=0.2, hi=0.2, c=3.0):
    toks = tokens(seqs)
    n = len(toks)
    value, grads, dual_n = 0.0, {}, 0
    for i, t, lp, old, a in toks:
        r = math.exp(lp - old)
        if a >= 0:
            rc = min(r, 1 + hi)
            if 1 / rc > c:  # soft dual clip: -A c logp
                loss, w = -a * c * lp, c
                dual_n += 1
            else:  # the flipped ratio: value -A / r_c, weight 1 / r (0 once r passes 1 + hi)
                loss, w = -a / rc, (1 / r if r <= 1 + hi else 0.0)
        else:
            rn = max(r, 1 - lo)
            if rn > c:
                loss, w = -a * c * lp, c
                dual_n += 1
            else:
                loss, w = -a * rn, (r if r >= 1 - lo else 0.0)
        value += loss / n
        grads[(i, t)] = -a * w / n
    return value, grads, {ASPO_DUAL: dual_n / n}


def m2po_dropped(toks, tau):
    """The (i, t) the M2PO mask drops: the largest d^2 first, until the mean of the rest is below tau."""
    ranked = sorted(toks, key=lambda tok: -((tok[2] - tok[3]) ** 2))
    m2 = [(lp - old) ** 2 for _, _, lp, old, _ in ranked]
    count = len(m2) - 1
    for k in range(len(m2)):
        rest = m2[k:]
        if sum(rest) / len(rest) < tau:
            count = k
            break
    return {(tok[0], tok[1]) for tok in ranked[:count]}


def ref_m2po(seqs, tau=0.04):
    toks = tokens(seqs)
    n = len(toks)
    dropped = m2po_dropped(toks, tau)
    value, grads = 0.0, {}
    for i, t, lp, old, a in toks:
        keep = (i, t) not in dropped
        r = math.exp(lp - old)
        value += -keep * r * a / n
        grads[(i, t)] = -keep * r * a / n
    m2 = sum((lp - old) ** 2 for _, _, lp, old, _ in toks) / n
    return value, grads, {M2PO_MASKED: len(dropped) / n, M2PO_M2: m2}


BAPO_DEFAULTS = {"rho": 0.5, "low": (0.6, 0.9, 0.05), "high": (1.2, 3.0, 0.05)}


def bapo_bounds(toks, rho, low_range, high_range):
    """The authors' search: the lower bound first, step by step to its maximum, then the upper one, until
    the positive tokens' share of sum |w A| (w = min(r, high) for A >= 0, max(r, low) else) reaches rho."""

    def share(low, high):
        pos = neg = 0.0
        for _, _, lp, old, a in toks:
            r = math.exp(lp - old)
            w = min(r, high) if a >= 0 else max(r, low)
            pos += max(w * a, 0.0)
            neg += max(-w * a, 0.0)
        return pos, neg

    def met(pos, neg):
        return pos + neg == 0 or pos / (pos + neg) >= rho - 1e-12

    (l0, l1, ls), (h0, h1, hs) = low_range, high_range
    low, high = l0, h0
    pos, neg = share(low, high)
    k = 0
    while not met(pos, neg) and low < l1:
        k += 1
        low = min(l0 + k * ls, l1)
        pos, neg = share(low, high)
    k = 0
    while not met(pos, neg) and high < h1:
        k += 1
        high = min(h0 + k * hs, h1)
        pos, neg = share(low, high)
    return low, high, pos / (pos + neg)


def ref_bapo(seqs, rho=0.5, low_range=(0.6, 0.9, 0.05), high_range=(1.2, 3.0, 0.05)):
    toks = tokens(seqs)
    n = len(toks)
    low, high, share = bapo_bounds(toks, rho, low_range, high_range)
    value, grads, low_n, high_n = 0.0, {}, 0, 0
    for i, t, lp, old, a in toks:
        r = math.exp(lp - old)
        clipped = min(max(r, low), high)
        loss = -min(r * a, clipped * a)
        # PPO's min keeps r's slope unless the clipped branch (a constant) is the smaller objective.
        w = 0.0 if (a > 0 and r > high) or (a < 0 and r < low) else r
        low_n += a < 0 and r < low
        high_n += a > 0 and r > high
        value += loss / n
        grads[(i, t)] = -a * w / n
    return (
        value,
        grads,
        {K.CLIP_LOW: low_n / n, K.CLIP_HIGH: high_n / n, BAPO_LOW: low, BAPO_HIGH: high, BAPO_SHARE: share},
    )


CASES = {
    "gppo": ("gppo", {}, lambda s: ref_gppo(s)),
    "gppo+dual": ("gppo", {"clip_ratio_c": 1.3}, lambda s: ref_gppo(s, c=1.3)),
    "ce_gppo": ("ce_gppo", {}, lambda s: ref_gppo(s, lo=0.2, hi=0.2, beta1=0.75, beta2=1.0)),
    "ce_gppo-own": (
        "ce_gppo",
        {"clip_range": 0.1, "clip_range_high": 0.15, "beta1": 0.3, "beta2": 1.7},
        lambda s: ref_gppo(s, lo=0.1, hi=0.15, beta1=0.3, beta2=1.7),
    ),
    "aspo": ("aspo", {}, lambda s: ref_aspo(s)),
    "aspo-tight": (
        "aspo",
        {"dual_clip_c": 1.2, "clip_range_high": 0.3},
        lambda s: ref_aspo(s, hi=0.3, c=1.2),
    ),
    "m2po": ("m2po", {}, lambda s: ref_m2po(s)),
    "m2po-loose": ("m2po", {"m2_threshold": 10.0}, lambda s: ref_m2po(s, tau=10.0)),
    "bapo": ("bapo", {}, lambda s: ref_bapo(s)),
    "bapo-share": ("bapo", {"positive_share": 0.9}, lambda s: ref_bapo(s, rho=0.9)),
    "bapo-small-steps": (
        "bapo",
        {"positive_share": 0.8, "ratio_low_step": 0.02, "ratio_high_max": 1.5, "ratio_high_step": 0.1},
        lambda s: ref_bapo(s, rho=0.8, low_range=(0.6, 0.9, 0.02), high_range=(1.2, 1.5, 0.1)),
    ),
}


@pytest.mark.parametrize("per_token_adv", [False, True], ids=["seq-adv", "token-adv"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_value_gradient_and_metrics_equal_the_formula(case, seed, per_token_adv):
    name, kwargs, ref = CASES[case]
    inputs, seqs = zoo_batch(LENGTHS, seed=seed, spread=0.5, per_token_adv=per_token_adv)
    out = LOSSES[name](**kwargs)(**inputs)
    value, grads, metrics = ref(seqs)
    torch.testing.assert_close(out.loss, torch.tensor(value, dtype=torch.float64))
    (grad,) = torch.autograd.grad(out.loss, inputs["logps"])
    torch.testing.assert_close(grad, expected_grad(seqs, inputs["logps"], grads))
    for key, want in metrics.items():
        assert out.metrics[key].item() == pytest.approx(want, abs=1e-6), key


def test_the_cases_reach_every_branch():
    # The batches above put tokens on every branch, so the references are not checked on one side only.
    hits = {"gppo_low": 0, "gppo_high": 0, "dual": 0, "aspo_dual": 0, "m2po_drop": 0, "bapo_moved": 0}
    for seed in (0, 1, 2):
        _, seqs = zoo_batch(LENGTHS, seed=seed, spread=0.5)
        m = ref_gppo(seqs, c=1.3)[2]
        hits["gppo_low"] += m[K.CLIP_LOW] > 0
        hits["gppo_high"] += m[K.CLIP_HIGH] > 0
        hits["dual"] += m[DUAL_CLIP] > 0
        hits["aspo_dual"] += ref_aspo(seqs, hi=0.3, c=1.2)[2][ASPO_DUAL] > 0
        hits["m2po_drop"] += ref_m2po(seqs)[2][M2PO_MASKED] > 0
        hits["bapo_moved"] += ref_bapo(seqs, rho=0.9)[2][BAPO_LOW] > 0.6
    assert all(hits.values()), hits


def test_bapo_raises_the_lower_bound_to_its_maximum_before_the_upper_one():
    # The authors' order: a missed target moves c_low all the way first, and only then c_high.
    inputs, seqs = zoo_batch(LENGTHS, seed=1, spread=0.5)
    out = LOSSES["bapo"](positive_share=0.9)(**inputs)
    assert out.metrics[BAPO_LOW].item() == pytest.approx(0.9)
    assert out.metrics[BAPO_HIGH].item() > 1.2
    start = LOSSES["bapo"](positive_share=0.01)(**inputs)  # met at once: the start bounds
    assert (start.metrics[BAPO_LOW].item(), start.metrics[BAPO_HIGH].item()) == pytest.approx((0.6, 1.2))


def test_m2po_drops_the_fewest_largest_tokens_that_bring_the_rest_below_the_threshold():
    _, seqs = zoo_batch(LENGTHS, seed=0, spread=0.5)
    toks = tokens(seqs)
    m2 = {(i, t): (lp - old) ** 2 for i, t, lp, old, _ in toks}
    dropped = m2po_dropped(toks, 0.04)
    kept = [v for key, v in m2.items() if key not in dropped]
    assert 0 < len(dropped) < len(toks)
    assert sum(kept) / len(kept) < 0.04
    assert min(m2[key] for key in dropped) >= max(kept)  # the largest ones
    back = min(m2[key] for key in dropped)  # one token fewer dropped would leave the mean too high
    assert (sum(kept) + back) / (len(kept) + 1) >= 0.04


@pytest.mark.parametrize("name", NEW)
def test_on_policy_each_is_reinforce_with_a_token_mean(name):
    inputs, seqs = zoo_batch(LENGTHS, seed=3)
    out = LOSSES[name]()(**dict(inputs, old_logps=None))
    (grad,) = torch.autograd.grad(out.loss, inputs["logps"])
    n = sum(LENGTHS)
    grads = {(i, t): -float(s.adv[t]) / n for i, s in enumerate(seqs) for t in range(len(s.logp))}
    torch.testing.assert_close(grad, expected_grad(seqs, inputs["logps"], grads))


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("bapo", {"ratio_low_start": 0.95, "ratio_low_max": 0.9}, "ratio_low_start <= ratio_low_max"),
        ("bapo", {"ratio_high_start": 1.0}, "< 1 < ratio_high_start"),
        ("bapo", {"positive_share": 0.0}, "positive_share must be in (0, 1]"),
        ("gppo", {"delta": 2.0}, "gppo does not take it"),
        ("aspo", {"dual_clip_c": 1.0}, "dual_clip_c must be > 1"),
        ("m2po", {"m2_threshold": 0.0}, "m2_threshold must be > 0"),
        ("ce_gppo", {"beta1": -0.1}, "beta1 must be >= 0"),
        ("aspo", {"clip_ratio_c": 3.0}, "clip_ratio_c applies to the PPO-clipped objective only"),
    ],
)
def test_bad_parameters_are_refused_by_name(name, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LOSSES[name](**kwargs)


def test_the_registry_and_so_the_zoo_sweep_and_help_list_them():
    from omegaconf import OmegaConf

    import twinkle_exp.cli  # noqa: F401  (registers the `twinkle_losses` resolver the zoo sweep reads)

    swept = OmegaConf.create({"x": "${twinkle_losses:}"}).x
    for name in NEW:
        assert name in LOSSES
        assert name in swept.split(","), swept


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW)
def test_each_trains_with_debug_fast(name, run_cli, tmp_path):
    import csv

    proc = run_cli(f"loss={name}", "debug=fast", "logger=csv")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_json,) = tmp_path.glob("outputs/*/*/run.json")
    status = json.loads(run_json.read_text())
    assert status["status"] == "finished" and status["final"]["steps"] == 4, status
    with open(run_json.parent / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses)
    header = rows[0].keys()
    for key in LOSSES[name]().metric_keys:
        assert f"train/{key}" in header, (key, sorted(header))
