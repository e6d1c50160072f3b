"""Each zoo variant and switch against its formula, written out here sequence by sequence in float64:
the loss, its gradient with respect to the log-probs and the variant's metrics."""

from __future__ import annotations

import math

import pytest
import torch
from loss_zoo_helpers import zoo_batch

from twinkle_exp.loss import LOSSES
from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss.objectives.clipped import CLIP_COV, DUAL_CLIP, KL_COV
from twinkle_exp.loss.objectives.reinforce import TOPR_WEIGHT, VESPO_PHI

LENGTHS = [3, 1, 5, 2, 4]
LO, HI = 0.2, 0.28
# DPPO's divergence bounds, (A < 0, A > 0) per divergence: probabilities move less than ratios do.
BOUNDS = {"tv": (0.05, 0.08), "kl": (0.005, 0.01)}


def ppo(r, a, lo=LO, hi=HI):
    return -torch.minimum(r * a, r.clamp(1 - lo, 1 + hi) * a)


def token_mean(seqs, per_seq_terms):
    return sum(t.sum() for t in per_seq_terms) / sum(len(s.logp) for s in seqs)


def seq_sum_mean(seqs, per_seq_terms):
    return sum(t.sum() for t in per_seq_terms) / len(seqs)


def seq_mean_token_mean(seqs, per_seq_terms):
    return sum(t.mean() for t in per_seq_terms) / len(seqs)


def frac(seqs, indicator):
    """Token mean over the batch of a per-token indicator computed from each sequence."""
    return sum(float(indicator(s).detach().double().sum()) for s in seqs) / sum(len(s.logp) for s in seqs)


def ratio(s):
    return torch.exp(s.logp - s.old)


def seq_ratio(s):
    return torch.exp((s.logp - s.old).mean()).expand(len(s.logp))


# --- references: (seqs) -> loss; each written from its paper's (or peer's) formula ---------------------
def ref_dapo(seqs):
    return token_mean(seqs, [ppo(ratio(s), s.adv) for s in seqs])


def ref_gspo_token(seqs):
    terms = []
    for s in seqs:
        value = torch.exp((s.logp - s.old).mean()).detach()
        s_t = value * torch.exp(s.logp - s.logp.detach())
        terms.append(ppo(s_t, s.adv))
    return seq_mean_token_mean(seqs, terms)


def ref_luspo(seqs):
    terms = []
    for s in seqs:
        seq_ratio = torch.exp((s.logp - s.old).mean())
        terms.append(len(s.logp) * ppo(seq_ratio, s.adv[0]))
    return sum(terms) / len(seqs)


def ref_gmpo(seqs, lo=0.4, hi=0.4):
    total = 0.0
    for s in seqs:
        a = s.adv[0]
        d = s.logp - s.old
        if a > 0:
            d = torch.minimum(d, torch.full_like(d, hi))  # a rise above hi is cut off
        elif a < 0:
            d = torch.maximum(d, torch.full_like(d, -lo))  # a fall below -lo is cut off
        else:
            d = d * 0
        total = total - a * torch.exp(d.mean())
    return total / len(seqs)


def ref_gpg(seqs):
    return token_mean(seqs, [-s.adv * s.logp for s in seqs])


def ref_vespo(seqs, k=(2.0, 3.0), lam=(3.0, 2.0)):
    terms = []
    for s in seqs:
        w = math.exp(float((s.logp.detach() - s.old).sum()))
        kk, ll = (k[0], lam[0]) if s.adv[0] >= 0 else (k[1], lam[1])
        phi = w**kk * math.exp(ll * (1 - w))
        terms.append(-phi * s.adv * s.logp)
    return token_mean(seqs, terms)


def dppo_keep(s, kind):
    lo, hi = BOUNDS[kind]
    p, q = s.logp.detach().exp(), s.old.exp()
    keep = []
    for pt, qt, a in zip(p.tolist(), q.tolist(), s.adv.tolist(), strict=True):
        if kind == "tv":
            ok = (pt - qt) <= hi if a > 0 else (pt - qt) >= -lo
        else:
            kl = qt * math.log(qt / pt) + (1 - qt) * math.log((1 - qt) / (1 - pt))
            ok = (kl <= hi or pt <= qt) if a > 0 else (kl <= lo or pt >= qt)
        keep.append(float(ok))
    return torch.tensor(keep, dtype=torch.float64)


def ref_dppo(kind):
    def ref(seqs):
        terms = []
        for s in seqs:
            weight = ratio(s).clamp(max=20.0).detach()
            terms.append(-dppo_keep(s, kind) * weight * s.adv * s.logp)
        return token_mean(seqs, terms)

    return ref


def ref_topr(level):
    def ref(seqs):
        terms = []
        for s in seqs:
            if level == "sequence":
                r = torch.exp((s.logp - s.old).sum()).detach().expand(len(s.logp))
            else:
                r = ratio(s).detach()
            weight = torch.where(s.adv > 0, torch.ones_like(r), r.clamp(0, 1))
            terms.append(-weight * s.adv * s.logp)
        return seq_sum_mean(seqs, terms)

    return ref


def ref_kimi(level, tau=0.1):
    def ref(seqs):
        total = 0.0
        for s in seqs:
            d = s.logp - s.old
            penalty = (tau / 2) * (d.sum() ** 2 if level == "sequence" else (d**2).sum())
            total = total + (-s.adv * s.logp).sum() + penalty
        return total / len(seqs)

    return ref


CASES = {
    "dapo": ({}, ref_dapo),
    "gspo_token": ({"clip_range": LO, "clip_range_high": HI}, ref_gspo_token),
    "luspo": ({"clip_range": LO, "clip_range_high": HI}, ref_luspo),
    "gmpo": ({}, ref_gmpo),
    "gpg": ({}, ref_gpg),
    "vespo": ({}, ref_vespo),
    "dppo_tv": (dict(zip(("clip_range", "clip_range_high"), BOUNDS["tv"], strict=True)), ref_dppo("tv")),
    "dppo_kl": (dict(zip(("clip_range", "clip_range_high"), BOUNDS["kl"], strict=True)), ref_dppo("kl")),
    "topr": ({}, ref_topr("sequence")),
    "topr-token": ({"ratio_level": "token"}, ref_topr("token")),
    "kimi": ({}, ref_kimi("sequence")),
    "kimi-token": ({"ratio_level": "token"}, ref_kimi("token")),
}


def check(loss_fn, ref, inputs, seqs, **call):
    out = loss_fn(**inputs, **call)
    expected = ref(seqs)
    (grad,) = torch.autograd.grad(out.loss, inputs["logps"], retain_graph=True)
    (grad_ref,) = torch.autograd.grad(expected, inputs["logps"])
    torch.testing.assert_close(out.loss, expected.to(out.loss.dtype), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grad, grad_ref, rtol=1e-10, atol=1e-12)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_variant_matches_its_formula(case, seed):
    params, ref = CASES[case]
    inputs, seqs = zoo_batch(LENGTHS, seed=seed)
    out = check(LOSSES[case.split("-")[0]](**params), ref, inputs, seqs)
    # The ratio metrics are the sequence ratio's where the importance weight is the sequence's.
    sequence_level = case in ("gspo_token", "luspo")
    expected = frac(seqs, lambda s: seq_ratio(s) if sequence_level else ratio(s))
    assert out.metrics[K.RATIO_MEAN].item() == pytest.approx(expected)


def test_the_cases_move_off_policy():
    # So the references are tested where variants differ: clipped, masked and tapered tokens all occur.
    inputs, seqs = zoo_batch(LENGTHS, seed=0)
    assert 0 < frac(seqs, lambda s: (ratio(s) > 1 + HI) | (ratio(s) < 1 - LO)) < 1
    assert 0 < frac(seqs, lambda s: 1 - dppo_keep(s, "tv")) < 1
    assert 0 < frac(seqs, lambda s: 1 - dppo_keep(s, "kl")) < 1


def test_gspo_token_differs_from_gspo_only_with_per_token_advantages():
    inputs, seqs = zoo_batch(LENGTHS, seed=3, per_token_adv=True)
    out = check(LOSSES["gspo_token"](clip_range=LO, clip_range_high=HI), ref_gspo_token, inputs, seqs)
    gspo = LOSSES["gspo"](clip_range=LO, clip_range_high=HI)(**inputs)
    g_tok = torch.autograd.grad(out.loss, inputs["logps"])[0]
    g_seq = torch.autograd.grad(gspo.loss, inputs["logps"])[0]
    assert not torch.allclose(g_tok, g_seq)
    inputs, seqs = zoo_batch(LENGTHS, seed=3)
    g_tok = torch.autograd.grad(LOSSES["gspo_token"]()(**inputs).loss, inputs["logps"])[0]
    g_seq = torch.autograd.grad(LOSSES["gspo"]()(**inputs).loss, inputs["logps"])[0]
    torch.testing.assert_close(g_tok, g_seq)


def test_gmpo_clip_metrics_are_the_binding_log_space_clips():
    inputs, seqs = zoo_batch(LENGTHS, seed=4, spread=0.8)
    out = LOSSES["gmpo"]()(**inputs)
    d = [s.logp.detach() - s.old for s in seqs]
    high = frac(seqs, lambda s: ((s.logp.detach() - s.old) > 0.4) & (s.adv > 0))
    low = frac(seqs, lambda s: ((s.logp.detach() - s.old) < -0.4) & (s.adv < 0))
    assert high > 0 and low > 0, d
    assert out.metrics[K.CLIP_HIGH].item() == pytest.approx(high)
    assert out.metrics[K.CLIP_LOW].item() == pytest.approx(low)


@pytest.mark.parametrize("kind", ["tv", "kl"])
def test_dppo_reports_its_masks_as_clip_metrics(kind):
    inputs, seqs = zoo_batch(LENGTHS, seed=0)
    lo, hi = BOUNDS[kind]
    out = LOSSES[f"dppo_{kind}"](clip_range=lo, clip_range_high=hi)(**inputs)
    high = frac(seqs, lambda s: (1 - dppo_keep(s, kind)).bool() & (s.adv > 0))
    low = frac(seqs, lambda s: (1 - dppo_keep(s, kind)).bool() & (s.adv < 0))
    assert out.metrics[K.CLIP_HIGH].item() == pytest.approx(high)
    assert out.metrics[K.CLIP_LOW].item() == pytest.approx(low)


def test_vespo_phi_metric_and_weight_at_ratio_one():
    inputs, seqs = zoo_batch(LENGTHS, seed=1)
    out = LOSSES["vespo"]()(**inputs)
    phis = []
    for s in seqs:
        w = math.exp(float((s.logp.detach() - s.old).sum()))
        kk, ll = (2.0, 3.0) if s.adv[0] >= 0 else (3.0, 2.0)
        phis += [w**kk * math.exp(ll * (1 - w))] * len(s.logp)
    assert out.metrics[VESPO_PHI].item() == pytest.approx(sum(phis) / len(phis), rel=1e-6)
    # On-policy w = 1, phi(1) = e^lambda 1^k e^-lambda = 1: plain REINFORCE, token mean (GPG's gradient).
    on = dict(inputs, old_logps=None)
    g_vespo = torch.autograd.grad(LOSSES["vespo"]()(**on).loss, inputs["logps"])[0]
    g_gpg = torch.autograd.grad(LOSSES["gpg"]()(**on).loss, inputs["logps"])[0]
    torch.testing.assert_close(g_vespo, g_gpg)


def test_topr_weight_metric():
    inputs, seqs = zoo_batch(LENGTHS, seed=2)
    out = LOSSES["topr"](ratio_level="token")(**inputs)
    expected = frac(seqs, lambda s: torch.where(s.adv > 0, 1.0, ratio(s).detach().clamp(0, 1)))
    assert out.metrics[TOPR_WEIGHT].item() == pytest.approx(expected)


# --- Clip-Cov and KL-Cov: token selection by covariance -----------------------------------------------
def covariances(seqs):
    """Per sequence, the centred product (A - mean A)(logp - mean logp), the means over every token."""
    all_a = torch.cat([s.adv for s in seqs])
    all_lp = torch.cat([s.logp.detach() for s in seqs])
    return [(s.adv - all_a.mean()) * (s.logp.detach() - all_lp.mean()) for s in seqs]


def test_clip_cov_detaches_every_band_token_when_the_share_is_one():
    inputs, seqs = zoo_batch(LENGTHS, seed=5, spread=0.3)
    lb, ub = 0.05, 0.6
    covs = covariances(seqs)

    def ref(seqs):
        terms = []
        for s, cov in zip(seqs, covs, strict=True):
            r = ratio(s)
            unclipped, clipped = -s.adv * r, -s.adv * r.clamp(1 - LO, 1 + HI)
            loss = torch.maximum(unclipped, clipped)
            band = (cov > lb) & (cov < ub) & ~(clipped > unclipped)
            terms.append(torch.where(band, loss.detach(), loss))
        return token_mean(seqs, terms)

    loss_fn = LOSSES["clip_cov"](
        clip_range=LO, clip_range_high=HI, clip_cov_ratio=1.0, clip_cov_lb=lb, clip_cov_ub=ub
    )
    out = check(loss_fn, ref, inputs, seqs)
    band = sum(int(((c > lb) & (c < ub)).sum()) for c in covs)
    assert 0 < out.metrics[CLIP_COV].item() <= band / sum(LENGTHS)


def test_clip_cov_detaches_the_requested_share_drawn_from_the_band():
    inputs, seqs = zoo_batch([40, 30, 50], seed=6, spread=0.05)
    loss_fn = LOSSES["clip_cov"](clip_cov_ratio=0.1, clip_cov_lb=-1.0, clip_cov_ub=1.0)
    torch.manual_seed(0)
    out = loss_fn(**inputs)
    assert out.metrics[CLIP_COV].item() == pytest.approx(int(0.1 * 120) / 120)
    grad = torch.autograd.grad(out.loss, inputs["logps"])[0]
    mask = inputs["labels"] != -100
    # the detached tokens are the masked tokens with zero gradient (A != 0 everywhere, so no other is zero)
    assert int(((grad == 0) & mask).sum()) == int(0.1 * 120)


def test_kl_cov_penalises_the_top_covariance_tokens():
    inputs, seqs = zoo_batch(LENGTHS, seed=7)
    n = sum(LENGTHS)
    share = 3 / n  # int(n * share) = 3 tokens
    covs = torch.cat(covariances(seqs))
    top = set(torch.topk(covs, 3).indices.tolist())

    def ref(seqs):
        terms, start = [], 0
        for s in seqs:
            picked = torch.tensor([float(start + j in top) for j in range(len(s.logp))], dtype=torch.float64)
            terms.append(-s.adv * ratio(s) + picked * 0.5 * (s.logp - s.old).abs())
            start += len(s.logp)
        return token_mean(seqs, terms)

    out = check(LOSSES["kl_cov"](kl_cov_ratio=share + 1e-9, kl_cov_coef=0.5), ref, inputs, seqs)
    assert out.metrics[KL_COV].item() == pytest.approx(3 / n)


# --- the switches -------------------------------------------------------------------------------------
def test_dual_clip_bounds_negative_advantage_losses():
    inputs, seqs = zoo_batch(LENGTHS, seed=8, spread=1.0)
    c = 1.5

    def ref(seqs):
        terms = []
        for s in seqs:
            loss = ppo(ratio(s), s.adv, LO, LO)
            terms.append(torch.where(s.adv < 0, torch.minimum(loss, -c * s.adv), loss))
        return seq_mean_token_mean(seqs, terms)

    out = check(LOSSES["grpo"](clip_ratio_c=c), ref, inputs, seqs)
    dual = frac(seqs, lambda s: (s.adv < 0) & (ppo(ratio(s), s.adv, LO, LO) > -c * s.adv))
    assert dual > 0
    assert out.metrics[DUAL_CLIP].item() == pytest.approx(dual)


def test_delta_caps_the_unclipped_ratio():
    inputs, seqs = zoo_batch(LENGTHS, seed=8, spread=1.0)

    def ref(seqs):
        terms = []
        for s in seqs:
            r = ratio(s)
            terms.append(-torch.minimum(r.clamp(max=1.5) * s.adv, r.clamp(1 - LO, 1 + LO) * s.adv))
        return token_mean(seqs, terms)

    check(LOSSES["bnpo"](delta=1.5), ref, inputs, seqs)
    assert frac(seqs, lambda s: (ratio(s) > 1.5) & (s.adv < 0)) > 0  # the cap binds somewhere


def test_kl_bias_correction_weighs_the_estimate_by_the_ratio():
    inputs, seqs = zoo_batch(LENGTHS, seed=9)

    def ref(seqs, corrected=True):
        terms = []
        for s in seqs:
            r = ratio(s)
            k3 = torch.exp(s.ref - s.logp) - (s.ref - s.logp) - 1
            terms.append(ppo(r, s.adv, LO, LO) + 0.1 * k3 * (r if corrected else 1.0))
        return seq_mean_token_mean(seqs, terms)

    out = check(LOSSES["grpo"](beta=0.1, kl_bias_correction=True), ref, inputs, seqs)
    k3 = frac(seqs, lambda s: torch.exp(s.ref - s.logp.detach()) - (s.ref - s.logp.detach()) - 1)
    assert out.metrics[K.KL].item() == pytest.approx(k3)  # the metric stays the plain estimate
    check(LOSSES["grpo"](beta=0.1), lambda q: ref(q, corrected=False), inputs, seqs)


def test_cispo_weight_floor():
    inputs, seqs = zoo_batch(LENGTHS, seed=10)

    def ref(seqs):
        return token_mean(seqs, [-ratio(s).clamp(1 - LO, 1 + LO).detach() * s.adv * s.logp for s in seqs])

    out = check(LOSSES["cispo"](weight_floor=True), ref, inputs, seqs)
    assert out.metrics[K.CISPO_CLIP].item() == pytest.approx(
        frac(seqs, lambda s: (ratio(s) > 1 + LO) | (ratio(s) < 1 - LO))
    )


def test_off_policy_mask_drops_stale_negative_sequences():
    inputs, seqs = zoo_batch(LENGTHS, seed=11, spread=0.5)
    threshold = 0.05

    def dropped(s):
        return bool(s.adv[0] < 0) and float((s.old - s.logp.detach()).mean()) > threshold

    def ref(seqs):
        return seq_mean_token_mean(
            seqs, [ppo(ratio(s), s.adv, LO, LO) * (0.0 if dropped(s) else 1.0) for s in seqs]
        )

    out = check(LOSSES["grpo"](off_policy_mask_threshold=threshold), ref, inputs, seqs)
    share = sum(len(s.logp) for s in seqs if dropped(s)) / sum(LENGTHS)
    assert 0 < share < 1
    assert out.metrics[K.OFF_POLICY_MASKED].item() == pytest.approx(share)


def test_top_entropy_quantile_trains_only_high_entropy_tokens():
    inputs, seqs = zoo_batch(LENGTHS, seed=12)
    all_h = torch.cat([s.entropy for s in seqs])
    threshold = torch.quantile(all_h.float(), 0.6).double()

    def ref(seqs):
        return token_mean(seqs, [-s.adv * s.logp * (s.entropy >= threshold) for s in seqs])

    out = check(LOSSES["gpg"](top_entropy_quantile=0.4), ref, inputs, seqs)
    assert out.metrics[K.TOP_ENTROPY_KEPT].item() == pytest.approx(
        float((all_h >= threshold).double().mean())
    )


def test_entropy_bonus_is_the_step_token_mean():
    inputs, seqs = zoo_batch(LENGTHS, seed=13)
    inputs["entropies"] = inputs["entropies"].clone().requires_grad_(True)

    def ref(seqs):
        return seq_mean_token_mean(seqs, [ppo(ratio(s), s.adv, LO, LO) for s in seqs])

    out = LOSSES["grpo"](entropy_coef=0.01)(**inputs)
    entropy_mean = float(sum(s.entropy.sum() for s in seqs)) / sum(LENGTHS)
    assert out.loss.item() == pytest.approx(ref(seqs).item() - 0.01 * entropy_mean, rel=1e-12)
    (g_h,) = torch.autograd.grad(out.loss, inputs["entropies"])
    mask = inputs["labels"] != -100
    torch.testing.assert_close(g_h, -0.01 / sum(LENGTHS) * mask.double())


def test_entropy_from_logits_has_the_softmax_entropy_and_its_gradient():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([[-100, 1, 2, 3, -100], [-100, 0, 1, 2, 3]])
    out = LOSSES["grpo"](entropy_coef=1.0)(
        logits=logits, labels=labels, advantages=torch.zeros(2, dtype=torch.float64)
    )
    p = logits[:, :-1].softmax(-1)
    h = -(p * p.log()).sum(-1)  # h[:, t] is the entropy of the distribution that drew labels[:, t + 1]
    mask = labels[:, 1:] != -100
    expected = -(h * mask).sum() / mask.sum()
    torch.testing.assert_close(out.loss, expected)
    g = torch.autograd.grad(out.loss, logits)[0]
    torch.testing.assert_close(g, torch.autograd.grad(expected, logits)[0])


def test_switch_defaults_change_nothing():
    # The defaults are the switches off: same loss, gradient and metric keys as with them spelled out.
    inputs, _ = zoo_batch(LENGTHS, seed=14)
    plain = LOSSES["grpo"](beta=0.1)(**inputs)
    spelled = LOSSES["grpo"](
        beta=0.1,
        clip_ratio_c=None,
        delta=None,
        kl_bias_correction=False,
        off_policy_mask_threshold=None,
        top_entropy_quantile=1.0,
        entropy_coef=0.0,
    )(**inputs)
    assert plain.metrics.keys() == spelled.metrics.keys()
    assert set(plain.metrics) == set(K.COMMON) | {K.KL}
    torch.testing.assert_close(plain.loss, spelled.loss, rtol=0, atol=0)
