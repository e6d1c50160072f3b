"""The six places where the zoo's form and a peer's differ, each form checked in float64 (docs/losses.md,
"Where the peers' forms differ"): the peer's against the peer's code (TRL 1.16's installed functions, skipped
without trl; verl transcribed from commit b178a3cd), the project's against its formula written out here.

1. VESPO with rollout-correction weights: folded into phi (TRL, default) or per token.
2. The off-policy mask's gap: to the sampler's log-probs (TRL, default) or the old ones.
3. The entropy bonus with the top-entropy mask: over all tokens (default) or the kept ones (TRL).
4. GMPO with the top-entropy mask: the geometric mean over the kept tokens (TRL's GMPOTrainer; the only form).
5. GMPO with rollout-correction weights: their geometric mean per sequence (verl, default) or arithmetic.
6. seq_mask: rejected sequences weighted 0 (default) or removed from the batch (verl, `rollout_mask`).
And `mode=mis` with `level=sequence` is refused.
"""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from loss_zoo_helpers import PROMPT, zoo_batch

from twinkle_exp.config.schema import Config, RolloutCorrectionConfig
from twinkle_exp.loss import LOSSES, completion_mask
from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss.rollout_correction import rollout_correction

LENGTHS = [3, 1, 5, 2, 4]


def sampler_for(inputs, seed, scale=0.3):
    """`[B, T]` sampler log-probs `scale`-noise away from the old ones, 0 off the mask."""
    mask = completion_mask(inputs["labels"])
    gen = torch.Generator().manual_seed(seed + 50)
    noise = scale * torch.randn(mask.shape, generator=gen, dtype=torch.float64)
    return ((inputs["old_logps"] + noise).clamp(max=-1e-3) * mask).detach(), mask


def view(t):
    """TRL's and verl's layout: completion columns only, `[B, C]`."""
    return t[:, PROMPT:]


def grad(loss, leaf):
    return torch.autograd.grad(loss, leaf, retain_graph=True)[0]


def trl():
    return pytest.importorskip("trl.trainer.grpo_trainer").GRPOTrainer


def one_process():
    """The accelerator TRL's methods ask for, as one process has it."""
    return SimpleNamespace(
        pad_across_processes=lambda t, **_: t,
        gather=lambda t: t,
        reduce=lambda t, reduction="sum": t,
        num_processes=1,
    )


# 1. VESPO ------------------------------------------------------------------------------------------------


def _vespo_by_hand(seqs, weights_rows, fold, ks=(2.0, 3.0, 3.0, 2.0)):
    """VESPO's loss written out per sequence: phi of the sequence's ratio, with or without the weights."""
    k_pos, l_pos, k_neg, l_neg = ks
    total, count = 0.0, 0
    for s, w in zip(seqs, weights_rows, strict=True):
        log_w = float((s.logp.detach() - s.old).clamp(-20, 20).sum())
        if fold:
            log_w += sum(
                min(max(math.log(x) if x > 0 else -math.inf, math.log(1e-8)), 20.0) for x in w.tolist()
            )
        log_w = min(max(log_w, math.log(1e-8)), 20.0)
        k, lam = (k_pos, l_pos) if float(s.adv[0]) >= 0 else (k_neg, l_neg)
        phi = math.exp(lam + k * log_w - lam * math.exp(log_w))
        per_token = -phi * s.adv * s.logp * (1.0 if fold else w)
        total = total + per_token.sum()
        count += len(s.logp)
    return total / count


def _weights_rows(weights, lengths):
    return [weights[i, PROMPT : PROMPT + n] for i, n in enumerate(lengths)]


@pytest.mark.parametrize("mode", ["tis", "mis"])
@pytest.mark.parametrize("seed", [0, 1])
def test_vespo_folds_the_weights_into_phi_as_trl(mode, seed):
    inputs, seqs = zoo_batch(LENGTHS, seed=seed, spread=0.1)
    sampler, mask = sampler_for(inputs, seed)
    weights, _ = rollout_correction(sampler, inputs["old_logps"], mask, mode=mode, low=0.8, high=1.25)
    ours = LOSSES["vespo"]()(**dict(inputs, ref_logps=None), rollout_weights=weights)
    by_hand = _vespo_by_hand(seqs, _weights_rows(weights, LENGTHS), fold=True)
    torch.testing.assert_close(ours.loss, by_hand)
    m = view(mask).double()
    adv = inputs["advantages"][:, None]
    # TRL's ratio is 1 off the completion (exp of a masked difference), so its unmasked sum adds nothing there.
    is_ratio = torch.where(view(mask), view(weights), torch.ones_like(view(weights)))
    phi = trl().get_gamma_weights(
        advantages=adv,
        log_ratio_per_token=view(inputs["logps"]) - view(inputs["old_logps"]),
        mask=m,
        importance_sampling_ratio=is_ratio,
    )
    # grpo_trainer.py 1.16, line 3146: no per-token IS factor for vespo.
    trl_loss = (-phi * adv * view(inputs["logps"]) * m).sum() / m.sum()
    torch.testing.assert_close(ours.loss, trl_loss)
    torch.testing.assert_close(grad(ours.loss, inputs["logps"]), grad(trl_loss, inputs["logps"]))


@pytest.mark.parametrize("seed", [0, 1])
def test_vespo_per_token_weights_form(seed):
    inputs, seqs = zoo_batch(LENGTHS, seed=seed, spread=0.1)
    sampler, mask = sampler_for(inputs, seed)
    weights, _ = rollout_correction(sampler, inputs["old_logps"], mask, mode="tis", upper=1.2)
    loss_fn = LOSSES["vespo"](fold_rollout_weights=False)
    ours = loss_fn(**dict(inputs, ref_logps=None), rollout_weights=weights)
    by_hand = _vespo_by_hand(seqs, _weights_rows(weights, LENGTHS), fold=False)
    torch.testing.assert_close(ours.loss, by_hand)
    torch.testing.assert_close(grad(ours.loss, inputs["logps"]), grad(by_hand, inputs["logps"]))
    folded = LOSSES["vespo"]()(**dict(inputs, ref_logps=None), rollout_weights=weights)
    assert abs(float((folded.loss - ours.loss).detach())) > 1e-3  # the two forms differ on this batch


@pytest.mark.parametrize(
    "mode,level,fold,refused",
    [
        ("seq_mask", "token", True, True),
        ("tis", "sequence", True, True),
        ("tis", "token", True, False),
        ("mis", "token", True, False),
        ("seq_mask", "token", False, False),
    ],
)
def test_the_fold_refuses_sequence_level_weights_at_start_up(mode, level, fold, refused):
    """The fold multiplies the tokens' weights, so a sequence's weight on each of its tokens is refused."""
    config = {
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 8},
        "reward": {},
        "optim": {"num_minibatches": 1, "rollout_correction": {"mode": mode, "level": level}},
        "loss": {"_target_": "twinkle_exp.loss.VESPOLoss", "fold_rollout_weights": fold},
    }
    problems = Config.relations(config)
    assert problems == (
        [
            f"loss.fold_rollout_weights=true takes per-token weights, not optim.rollout_correction.mode={mode} "
            "at the sequence level; use a token-level mode or loss.fold_rollout_weights=false"
        ]
        if refused
        else []
    )


# 2. The off-policy mask ----------------------------------------------------------------------------------


def _grpo_masked(inputs, keep):
    """TRL's grpo loss with the off-policy mask `keep` `[B, 1]` (grpo_trainer.py 1.16: the PPO clip, the mask
    on the per-token loss, the mean over sequences of each sequence's token mean)."""
    m = view(completion_mask(inputs["labels"])).double()
    adv = inputs["advantages"][:, None]
    coef_1 = torch.exp(view(inputs["logps"]) - view(inputs["old_logps"]))
    per_token = -torch.min(coef_1 * adv, coef_1.clamp(0.8, 1.2) * adv) * keep
    return ((per_token * m).sum(-1) / m.sum(-1)).mean()


THRESHOLDS = [0.0, 0.1, 0.2]


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_off_policy_mask_measures_against_the_sampler_as_trl(threshold):
    inputs, _ = zoo_batch(LENGTHS, seed=8, spread=0.3)
    sampler, mask = sampler_for(inputs, 8, scale=0.5)
    plain = dict(inputs, ref_logps=None)
    m = view(mask).double()
    adv = inputs["advantages"][:, None]
    ours = LOSSES["grpo"](off_policy_mask_threshold=threshold)(**plain, sampler_logps=sampler)
    old_form = LOSSES["grpo"](off_policy_mask_threshold=threshold, off_policy_mask_reference="old")
    for mu, out in ((sampler, ours), (inputs["old_logps"], old_form(**plain, sampler_logps=sampler))):
        gap = ((view(mu) - view(inputs["logps"]).detach()) * m).sum(-1, keepdim=True) / m.sum(
            -1, keepdim=True
        )
        by_hand = (~((adv < 0) & (gap > threshold))).double()  # DeepSeek-V3.2's rule, written out
        torch.testing.assert_close(out.loss, _grpo_masked(inputs, by_hand))
    mask_fn = trl().get_off_policy_mask
    to_sampler = mask_fn(adv, view(inputs["logps"]), view(sampler), m, threshold)
    to_old = mask_fn(adv, view(inputs["logps"]), view(inputs["old_logps"]), m, threshold)
    torch.testing.assert_close(ours.loss, _grpo_masked(inputs, to_sampler))
    dropped = ((1 - to_sampler) * m).sum() / m.sum()
    assert ours.metrics[K.OFF_POLICY_MASKED].item() == pytest.approx(dropped.item())
    # The old log-probs' form, asked for, and TRL's fallback when no sampler log-probs are given (line 3073).
    torch.testing.assert_close(old_form(**plain, sampler_logps=sampler).loss, _grpo_masked(inputs, to_old))
    fallback = LOSSES["grpo"](off_policy_mask_threshold=threshold)(**plain)
    torch.testing.assert_close(fallback.loss, _grpo_masked(inputs, to_old))


def test_the_two_references_mask_different_sequences():
    inputs, _ = zoo_batch(LENGTHS, seed=8, spread=0.3)
    sampler, mask = sampler_for(inputs, 8, scale=0.5)
    adv = inputs["advantages"][:, None]
    m = view(mask).double()
    mask_fn = trl().get_off_policy_mask
    differ = [
        not torch.equal(
            mask_fn(adv, view(inputs["logps"]), view(sampler), m, t),
            mask_fn(adv, view(inputs["logps"]), view(inputs["old_logps"]), m, t),
        )
        for t in THRESHOLDS
    ]
    assert all(differ)  # the test above compares two different masks at each threshold, not one


# 3. The entropy bonus with the top-entropy mask ----------------------------------------------------------


@pytest.mark.parametrize("quantile", [0.3, 0.6])
def test_entropy_bonus_over_the_kept_tokens_as_trl(quantile):
    inputs, _ = zoo_batch(LENGTHS, seed=5)
    entropies = inputs["entropies"].clone().requires_grad_(True)
    base = dict(inputs, ref_logps=None, entropies=entropies)
    coef = 0.3
    with_bonus = LOSSES["grpo"](top_entropy_quantile=quantile, entropy_coef=coef, entropy_tokens="kept")(
        **base
    )
    without = LOSSES["grpo"](top_entropy_quantile=quantile)(**base)
    m = view(completion_mask(inputs["labels"])).double()
    stub = SimpleNamespace(accelerator=one_process())
    keep = trl().get_high_entropy_mask(stub, view(entropies).detach(), m, 1 - quantile)
    # grpo_trainer.py 1.16, lines 3192 and 3199-3201 (one process, no accumulation).
    effective_mask = m * keep
    entropy_loss = (view(entropies) * effective_mask).sum() / effective_mask.sum().clamp(min=1.0)
    torch.testing.assert_close(with_bonus.loss - without.loss, -coef * entropy_loss)
    torch.testing.assert_close(grad(with_bonus.loss, entropies), grad(-coef * entropy_loss, entropies))


def test_entropy_bonus_over_all_tokens_is_the_default():
    inputs, seqs = zoo_batch(LENGTHS, seed=5)
    entropies = inputs["entropies"].clone().requires_grad_(True)
    base = dict(inputs, ref_logps=None, entropies=entropies)
    loss_fn = LOSSES["grpo"](top_entropy_quantile=0.3, entropy_coef=0.3)
    assert loss_fn.entropy_tokens == "all"
    bonus = loss_fn(**base).loss - LOSSES["grpo"](top_entropy_quantile=0.3)(**base).loss
    rows = [entropies[i, PROMPT : PROMPT + n] for i, n in enumerate(LENGTHS)]
    by_hand = -0.3 * sum(r.sum() for r in rows) / sum(LENGTHS)
    torch.testing.assert_close(bonus, by_hand)
    kept = LOSSES["grpo"](top_entropy_quantile=0.3, entropy_coef=0.3, entropy_tokens="kept")(**base).loss
    assert abs(float((kept - loss_fn(**base).loss).detach())) > 1e-3


# 4 and 5. GMPO -------------------------------------------------------------------------------------------


def _trl_gmpo(inputs, quantile, epsilon=0.4, beta=0.0):
    """TRL 1.16's `GMPOTrainer._compute_loss` itself, on a stand-in trainer that hands it our log-probs."""
    gmpo = pytest.importorskip("trl.experimental.gmpo.gmpo_trainer")
    GRPOTrainer = trl()
    mask = view(completion_mask(inputs["labels"])).long()
    logps, entropies = view(inputs["logps"]), view(inputs["entropies"])
    stub = SimpleNamespace(
        accelerator=one_process(),
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, entropies, None),
        top_entropy_quantile=quantile,
        epsilon_low=epsilon,
        epsilon_high=epsilon,
        beta=beta,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        _metrics=defaultdict(lambda: defaultdict(list)),
    )
    stub.get_high_entropy_mask = lambda e, m, t: GRPOTrainer.get_high_entropy_mask(stub, e, m, t)
    batch = {
        "prompt_ids": torch.zeros(mask.shape[0], PROMPT, dtype=torch.long),
        "prompt_mask": torch.ones(mask.shape[0], PROMPT, dtype=torch.long),
        "completion_ids": view(inputs["labels"]).clamp(min=0),
        "completion_mask": mask,
        "advantages": inputs["advantages"],
        "old_per_token_logps": view(inputs["old_logps"]),
        "ref_per_token_logps": view(inputs["ref_logps"]),
    }
    return gmpo.GMPOTrainer._compute_loss(stub, None, batch), stub


@pytest.mark.parametrize("quantile", [1.0, 0.6, 0.3])
@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_gmpo_takes_its_mean_over_the_kept_tokens_as_trl(quantile, beta):
    inputs, _ = zoo_batch(LENGTHS, seed=6, spread=0.5)
    ours = LOSSES["gmpo"](top_entropy_quantile=quantile, beta=beta)(**inputs)
    theirs, stub = _trl_gmpo(inputs, quantile, beta=beta)
    torch.testing.assert_close(grad(ours.loss, inputs["logps"]), grad(theirs, inputs["logps"]))
    # A sequence with no kept token adds 0 here; TRL's coefficient is then exp(0) = 1, a constant -A_i
    # without gradient.
    m = view(completion_mask(inputs["labels"])).double()
    if quantile < 1.0:
        keep = trl().get_high_entropy_mask(stub, view(inputs["entropies"]), m, 1 - quantile)
        none_kept = (keep * m).sum(-1) == 0
    else:
        none_kept = torch.zeros(len(LENGTHS), dtype=torch.bool)
    constant = (-inputs["advantages"] * none_kept).sum() / len(LENGTHS)
    torch.testing.assert_close(ours.loss + constant, theirs)
    if quantile == 0.3:
        assert none_kept.any() and not none_kept.all()  # both kinds of sequence are in the check


def test_gmpo_dropped_tokens_get_no_gradient():
    inputs, _ = zoo_batch(LENGTHS, seed=6, spread=0.5)
    out = LOSSES["gmpo"](top_entropy_quantile=0.5)(**dict(inputs, ref_logps=None))
    g = grad(out.loss, inputs["logps"])
    mask = completion_mask(inputs["labels"])
    e = inputs["entropies"]
    threshold = torch.quantile(e[mask], 0.5)
    dropped = mask & (e < threshold)
    assert dropped.any() and (g[dropped] == 0).all()
    assert (g[mask & ~dropped] != 0).sum() > 0


def verl_geo_mean(old_log_prob, log_prob, advantages, response_mask, clip_low, clip_high, rollout_is_weights):
    """verl's `compute_policy_loss_geo_mean`, verl/trainer/ppo/core_algos.py lines 1678-1707 at b178a3cd
    (the metrics left out)."""
    negative_approx_kl = log_prob - old_log_prob
    sgn_advantage = torch.sign(advantages)
    negative_approx_kl_clamp = torch.clamp(negative_approx_kl, -clip_low, clip_high)
    negative_approx_kl_min = torch.min(
        sgn_advantage * negative_approx_kl, sgn_advantage * negative_approx_kl_clamp
    )
    negative_approx_kl_min = sgn_advantage * negative_approx_kl_min
    response_mask_sum = response_mask.sum(dim=-1)
    ratio = torch.exp((negative_approx_kl_min * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8))
    advantage = (advantages * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8)
    pg_losses = -advantage * ratio
    if rollout_is_weights is not None:
        seq_is_weights = torch.exp(
            (torch.log(rollout_is_weights + 1e-10) * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8)
        )
        pg_losses = pg_losses * seq_is_weights
    return torch.mean(pg_losses)


@pytest.mark.parametrize("mode", ["tis", "mis"])
@pytest.mark.parametrize("seed", [0, 1])
def test_gmpo_takes_the_geometric_mean_of_the_weights_as_verl(mode, seed):
    inputs, _ = zoo_batch(LENGTHS, seed=seed, spread=0.5)
    sampler, mask = sampler_for(inputs, seed, scale=0.4)
    weights, _ = rollout_correction(
        sampler, inputs["old_logps"], mask, mode=mode, upper=1.3, low=0.7, high=1.4
    )
    if mode == "mis":
        assert ((weights == 0) & mask).any()  # a dropped token, verl's log(0 + 1e-10), is in the check
    ours = LOSSES["gmpo"]()(**dict(inputs, ref_logps=None), rollout_weights=weights)
    m = view(mask).double()
    theirs = verl_geo_mean(
        view(inputs["old_logps"]),
        view(inputs["logps"]),
        inputs["advantages"][:, None] * m,
        m,
        0.4,
        0.4,
        view(weights),
    )
    torch.testing.assert_close(ours.loss, theirs)
    torch.testing.assert_close(grad(ours.loss, inputs["logps"]), grad(theirs, inputs["logps"]))


def test_gmpo_arithmetic_mean_of_the_weights():
    inputs, seqs = zoo_batch(LENGTHS, seed=2, spread=0.5)
    sampler, mask = sampler_for(inputs, 2, scale=0.4)
    weights, _ = rollout_correction(sampler, inputs["old_logps"], mask, mode="tis", upper=1.3)
    ours = LOSSES["gmpo"](rollout_weight_mean="arithmetic")(
        **dict(inputs, ref_logps=None), rollout_weights=weights
    )
    total = 0.0
    for s, w in zip(seqs, _weights_rows(weights, LENGTHS), strict=True):
        d = s.logp - s.old
        a = float(s.adv[0])
        d_min = torch.minimum(d, d.clamp(-0.4, 0.4)) if a > 0 else torch.maximum(d, d.clamp(-0.4, 0.4))
        total = total - a * torch.exp(d_min.mean()) * w.mean()
    by_hand = total / len(seqs)
    torch.testing.assert_close(ours.loss, by_hand)
    torch.testing.assert_close(grad(ours.loss, inputs["logps"]), grad(by_hand, inputs["logps"]))
    geometric = LOSSES["gmpo"]()(**dict(inputs, ref_logps=None), rollout_weights=weights)
    assert abs(float((geometric.loss - ours.loss).detach())) > 1e-4


# 6. seq_mask ---------------------------------------------------------------------------------------------


def verl_agg_loss(loss_mat, loss_mask, loss_agg_mode):
    """verl's `agg_loss`, core_algos.py lines 1055-1071 at b178a3cd, one process, local counts."""
    if loss_agg_mode == "token-mean":
        return (loss_mat * loss_mask).sum() / loss_mask.sum()
    seq_mask = torch.sum(loss_mask, dim=-1)
    seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_mask + 1e-8)
    seq_mask = (seq_mask > 0).float()
    return (seq_losses * seq_mask).sum() / seq_mask.sum()


@pytest.mark.parametrize("name,agg", [("grpo", "seq-mean-token-mean"), ("dapo", "token-mean")])
def test_seq_mask_as_verl_removes_rejected_sequences(name, agg):
    inputs, _ = zoo_batch(LENGTHS, seed=7, spread=0.2)
    sampler, mask = sampler_for(inputs, 7, scale=0.5)
    weights, _ = rollout_correction(sampler, inputs["old_logps"], mask, mode="seq_mask", low=0.8, high=1.25)
    rejected = mask.any(-1) & ~(weights > 0).any(-1)
    assert rejected.any() and not rejected.all()
    beta = 0.05
    ours = LOSSES[name](beta=beta)(**inputs, rollout_mask=weights > 0)
    # verl: the rejection replaces response_mask (rollout_corr_helper.py line 991), which the actor's policy
    # and KL terms both aggregate over (dp_actor.py lines 566, 640-648); k3 as the project's default.
    response_mask = view(mask & (weights > 0)).double()
    adv = inputs["advantages"][:, None]
    hi = 0.28 if name == "dapo" else 0.2
    ratio = torch.exp(view(inputs["logps"]) - view(inputs["old_logps"]))
    pg = -torch.min(ratio * adv, ratio.clamp(0.8, 1 + hi) * adv)
    delta = view(inputs["ref_logps"]) - view(inputs["logps"])
    kld = torch.exp(delta) - delta - 1
    theirs = verl_agg_loss(pg, response_mask, agg) + beta * verl_agg_loss(kld, response_mask, agg)
    torch.testing.assert_close(ours.loss, theirs)
    torch.testing.assert_close(grad(ours.loss, inputs["logps"]), grad(theirs, inputs["logps"]))


def test_seq_mask_weights_keep_rejected_sequences_in_the_counts_and_the_kl():
    inputs, seqs = zoo_batch(LENGTHS, seed=7, spread=0.2)
    sampler, mask = sampler_for(inputs, 7, scale=0.5)
    weights, _ = rollout_correction(sampler, inputs["old_logps"], mask, mode="seq_mask", low=0.8, high=1.25)
    beta = 0.05
    ours = LOSSES["dapo"](beta=beta)(**inputs, rollout_weights=weights)
    total = 0.0
    for s, w in zip(seqs, _weights_rows(weights, LENGTHS), strict=True):
        r = torch.exp(s.logp - s.old)
        pg = -torch.minimum(r * s.adv, r.clamp(0.8, 1.28) * s.adv)
        delta = s.ref - s.logp
        total = total + (pg * w + beta * (torch.exp(delta) - delta - 1)).sum()
    by_hand = total / sum(LENGTHS)  # every token counts, the rejected ones too
    torch.testing.assert_close(ours.loss, by_hand)
    removed = LOSSES["dapo"](beta=beta)(**inputs, rollout_mask=weights > 0)
    assert abs(float((removed.loss - ours.loss).detach())) > 1e-4


def test_rollout_mask_counts_only_the_kept_sequences():
    inputs, _ = zoo_batch(LENGTHS, seed=7, spread=0.2)
    mask = completion_mask(inputs["labels"])
    keep = mask.clone()
    keep[1] = False  # the second sequence rejected
    with pytest.raises(ValueError, match="num_sequences=3 is smaller than the 4 sequences"):
        LOSSES["grpo"]()(**inputs, rollout_mask=keep, num_sequences=3)
    rows = [0, 2, 3, 4]
    alone = LOSSES["grpo"](beta=0.05)(**{k: v[rows] for k, v in inputs.items()})
    removed = LOSSES["grpo"](beta=0.05)(**inputs, rollout_mask=keep)
    torch.testing.assert_close(removed.loss, alone.loss)


# mis with level=sequence ---------------------------------------------------------------------------------


def test_mis_at_sequence_level_is_refused():
    inputs, _ = zoo_batch(LENGTHS, seed=0)
    sampler, mask = sampler_for(inputs, 0)
    with pytest.raises(ValueError, match="mode=mis is per token: level=sequence applies to tis only"):
        rollout_correction(sampler, inputs["old_logps"], mask, mode="mis", level="sequence")
    config = {"mode": "mis", "level": "sequence", "upper": 2.0, "low": 0.5, "high": 2.0}
    assert RolloutCorrectionConfig.relations(config) == [
        "optim.rollout_correction.mode=mis is per token: level=sequence applies to tis only"
    ]
    assert RolloutCorrectionConfig.relations(dict(config, mode="tis")) == []


# The new inputs and forms keep the zoo's contracts: packed == padded, micro-batches sum to the step -------

INVARIANT_LENGTHS = [3, 1, 5, 2, 4, 2]
FORMS = {
    "vespo+fold": ("vespo", {}, "weights"),
    "vespo+per_token": ("vespo", {"fold_rollout_weights": False}, "weights"),
    "gmpo+geometric": ("gmpo", {}, "weights"),
    "gmpo+arithmetic": ("gmpo", {"rollout_weight_mean": "arithmetic"}, "weights"),
    "gmpo+off_policy": ("gmpo", {"off_policy_mask_threshold": 0.0}, "sampler"),
    "gmpo+top_entropy": ("gmpo", {"top_entropy_quantile": 0.5}, "weights"),
    "grpo+off_policy_sampler": ("grpo", {"off_policy_mask_threshold": 0.0}, "sampler"),
    "grpo+entropy_kept": (
        "grpo",
        {"top_entropy_quantile": 0.5, "entropy_coef": 0.1, "entropy_tokens": "kept"},
        None,
    ),
    "grpo+rollout_mask": ("grpo", {}, "reject"),
    "dapo+rollout_mask": ("dapo", {}, "reject"),
}
PER_CALL_FORMS = {"gmpo+top_entropy", "grpo+entropy_kept"}  # the top-entropy quantile is the call's


def form_inputs(extra, seed=30):
    inputs, _ = zoo_batch(INVARIANT_LENGTHS, seed=seed, spread=0.3)
    sampler, mask = sampler_for(inputs, seed, scale=0.5)
    if extra == "weights":
        weights, _ = rollout_correction(sampler, inputs["old_logps"], mask, mode="mis", low=0.7, high=1.4)
        inputs["rollout_weights"] = weights
    elif extra == "sampler":
        inputs["sampler_logps"] = sampler
    elif extra == "reject":
        weights, _ = rollout_correction(
            sampler, inputs["old_logps"], mask, mode="seq_mask", low=0.8, high=1.25
        )
        inputs["rollout_mask"] = weights > 0
        rejected = mask.any(-1) & ~inputs["rollout_mask"].any(-1)
        assert rejected.any() and not rejected.all()
    return inputs, mask


def pack_rows(inputs, mask):
    ends = [int(row.nonzero().max()) + 1 for row in mask]

    def cat(t):
        return torch.cat([t[i, :e] for i, e in enumerate(ends)])[None]

    packed = {k: cat(v) for k, v in inputs.items() if k not in ("advantages", "logps")}
    packed["logps"] = cat(inputs["logps"].detach()).requires_grad_(True)
    packed["advantages"] = inputs["advantages"]
    packed["position_ids"] = torch.cat([torch.arange(e) for e in ends])[None]
    return packed, ends


@pytest.mark.parametrize("form", sorted(FORMS))
def test_new_forms_packed_equals_padded(form):
    name, kwargs, extra = FORMS[form]
    inputs, mask = form_inputs(extra)
    loss_fn = LOSSES[name](beta=0.04, **kwargs)
    padded = loss_fn(**inputs)
    packed_inputs, ends = pack_rows(inputs, mask)
    packed = loss_fn(**packed_inputs)
    torch.testing.assert_close(packed.loss, padded.loss)
    for key in padded.metrics:
        torch.testing.assert_close(packed.metrics[key], padded.metrics[key], msg=key)
    g_padded = grad(padded.loss, inputs["logps"])
    g_packed = grad(packed.loss, packed_inputs["logps"])
    torch.testing.assert_close(g_packed[0], torch.cat([g_padded[i, :e] for i, e in enumerate(ends)]))


@pytest.mark.parametrize("form", sorted(set(FORMS) - PER_CALL_FORMS))
@pytest.mark.parametrize("split", [[1, 5], [3, 3], [2, 2, 2]])
def test_new_forms_micro_batches_sum_to_the_step(form, split):
    name, kwargs, extra = FORMS[form]
    inputs, mask = form_inputs(extra)
    loss_fn = LOSSES[name](beta=0.04, **kwargs)
    full = loss_fn(**inputs)
    # verl's rejection counts the step over the kept tokens and the sequences that keep any.
    kept = mask & inputs["rollout_mask"] if extra == "reject" else mask
    totals = {"num_sequences": int(kept.any(-1).sum()), "num_tokens": int(kept.sum())}
    if extra != "reject":
        totals["num_sequences"] = len(INVARIANT_LENGTHS)
    total, start = 0.0, 0
    for size in split:
        rows = slice(start, start + size)
        total = total + loss_fn(**{k: v[rows] for k, v in inputs.items()}, **totals).loss
        start += size
    torch.testing.assert_close(total, full.loss)
    torch.testing.assert_close(grad(total, inputs["logps"]), grad(full.loss, inputs["logps"]))
