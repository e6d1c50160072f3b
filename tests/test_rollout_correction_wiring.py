"""The trainer's side of issue 22: the rollout correction and the entropy switches in `accumulate_gradients`.

Each step is compared, in float64, with the loss called by hand on the whole batch with weights written out
here from their definition (pi_old / pi_sampler, truncated, masked or per sequence), so the wiring, the
micro-batch split and the metrics' reduction are checked together.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from hydra import compose

from twinkle_exp import metric_names as M
from twinkle_exp.config.checks import config_problems
from twinkle_exp.config.schema import RolloutCorrectionConfig
from twinkle_exp.config.store import register_configs
from twinkle_exp.lifecycle.nonfinite import NonFiniteGuard
from twinkle_exp.loss import GRPOLoss, LossOutput, completion_mask
from twinkle_exp.loss import metric_keys as K
from twinkle_exp.policy.build import tiny_policy
from twinkle_exp.policy.logprobs import sequence_logps
from twinkle_exp.sampling.generate import SamplingOptions, generate
from twinkle_exp.sampling.sampler_copy import SamplerCopy
from twinkle_exp.training.micro_loss import LossExtras
from twinkle_exp.training.old_logps import should_recompute
from twinkle_exp.training.step_metrics import StepMetrics
from twinkle_exp.training.update_step import accumulate_gradients

register_configs()
UPPER, LOW, HIGH = 1.15, 0.92, 1.08


def _rollout(seed: int = 0):
    """A float64 tiny policy, 2 prompts x 4 samples, and old log-probs 'recomputed' off the sampler's.

    The recomputed ones get noise of 0.2 nats per token, so the correction weights spread over [0.5, 2] and
    every mode truncates or drops some tokens.
    """
    torch.manual_seed(seed)
    policy = tiny_policy(d_model=32, n_layers=1, n_heads=2, max_seq_len=32)
    model = policy.model.double()
    gen = torch.Generator().manual_seed(seed)
    b = generate(
        model,
        policy.tokenizer,
        ["12+3=", "4+56="],
        SamplingOptions(max_new_tokens=6, group_size=4),
        generator=gen,
    )
    mask = b.completion_mask
    noise = 0.2 * torch.randn(b.old_logps.shape, generator=gen, dtype=torch.float64)
    old = (b.old_logps.double() + noise).masked_fill(~mask, 0.0)
    adv = torch.randn(b.input_ids.shape[0], generator=gen, dtype=torch.float64)
    # label_ends at the full width: every micro-batch's pass runs the rollout's columns (no trim).
    ends = torch.full((b.input_ids.shape[0],), b.input_ids.shape[1])
    plan = SimpleNamespace(
        rollout=b, adv=SimpleNamespace(advantages=adv), old_logps=old, ref_logps=None, label_ends=ends
    )
    return model, plan


def _grads(model) -> torch.Tensor:
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.zero_grad(set_to_none=True)
    return grads


def _step(model, loss_fn, plan, correction, splits=((0, 3), (3, 8))):
    rows = torch.arange(plan.rollout.input_ids.shape[0])
    parts = [(rows[a:b], None) for a, b in splits]
    stats = accumulate_gradients(
        model,
        loss_fn,
        plan,
        parts,
        temperature=1.0,
        guard=NonFiniteGuard(10),
        backward=lambda loss: loss.backward(),
        sampler_gap=False,
        extras=LossExtras(correction=correction),
    )
    return _grads(model), stats.summary(torch.tensor(0.0), 0.0)


def _hand_weights(mode: str, level: str, sampler, old, mask) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, the ratio the mode acts on), `[B, T]` each, from the definitions (one sequence per row)."""
    log_rho = (old - sampler.double()) * mask
    if mode == "seq_mask":
        per_row = log_rho.sum(1) / mask.sum(1)
        rho = per_row.exp()[:, None].expand_as(log_rho)
        return ((rho >= LOW) & (rho <= HIGH)).double() * mask, rho
    if mode == "tis" and level == "sequence":
        rho = log_rho.sum(1).exp()[:, None].expand_as(log_rho)
    else:
        rho = log_rho.exp()
    if mode == "tis":
        return torch.minimum(rho, torch.tensor(UPPER, dtype=rho.dtype)) * mask, rho
    return torch.where((rho >= LOW) & (rho <= HIGH), rho, 0.0) * mask, rho  # mis


@pytest.mark.parametrize(
    ("mode", "level"), [("tis", "token"), ("tis", "sequence"), ("mis", "token"), ("seq_mask", "token")]
)
def test_a_corrected_step_is_the_loss_with_the_weights_by_hand(mode, level):
    model, plan = _rollout()
    loss_fn = GRPOLoss(beta=0.0)
    correction = RolloutCorrectionConfig(mode=mode, level=level, upper=UPPER, low=LOW, high=HIGH)
    got, metrics = _step(model, loss_fn, plan, correction)

    b = plan.rollout
    mask = completion_mask(b.labels)
    weights, rho = _hand_weights(mode, level, b.old_logps, plan.old_logps, mask)
    logps, _ = sequence_logps(model, b.input_ids, b.attention_mask, b.position_ids, b.labels)
    out = loss_fn(
        logps=logps,
        labels=b.labels,
        advantages=plan.adv.advantages,
        old_logps=plan.old_logps,
        ref_logps=None,
        rollout_weights=weights,
    )
    out.loss.backward()
    want = _grads(model)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)

    on = rho[mask]
    assert metrics[M.TRAIN + K.ROLLOUT_RATIO_MIN] == pytest.approx(float(on.min()), rel=1e-6)
    assert metrics[M.TRAIN + K.ROLLOUT_RATIO_MAX] == pytest.approx(float(on.max()), rel=1e-6)
    assert metrics[M.TRAIN + K.ROLLOUT_RATIO_MEAN] == pytest.approx(float(on.mean()), rel=1e-6)
    dropped = float(((weights == 0) & mask).sum() / mask.sum())
    assert metrics[M.TRAIN + K.ROLLOUT_MASKED] == pytest.approx(dropped, abs=1e-7)
    # The weights bind somewhere, so the test could tell a step that ignored them.
    uncorrected, _ = _step(model, loss_fn, plan, None)
    assert not torch.allclose(got, uncorrected, rtol=1e-6)
    assert M.TRAIN + K.ROLLOUT_RATIO_MIN not in _step(model, loss_fn, plan, RolloutCorrectionConfig())[1]


def test_the_correction_metrics_reduce_as_min_max_and_token_means_over_micro_batches():
    stats = StepMetrics()
    loss = torch.tensor(0.5)
    base = {K.RATIO_MEAN: torch.tensor(1.0), K.RATIO_MIN: torch.tensor(1.0), K.RATIO_MAX: torch.tensor(1.0)}
    # (tokens, ratio mean, min, max, masked fraction) of two micro-batches
    for tokens, mean, low, high, masked in ((3, 0.9, 0.7, 1.1, 1 / 3), (1, 1.3, 1.3, 1.3, 0.0)):
        mask = torch.zeros(1, 4, dtype=torch.bool)
        mask[0, :tokens] = True
        correction = {
            K.ROLLOUT_RATIO_MEAN: torch.tensor(mean),
            K.ROLLOUT_RATIO_MIN: torch.tensor(low),
            K.ROLLOUT_RATIO_MAX: torch.tensor(high),
            K.ROLLOUT_MASKED: torch.tensor(masked),
        }
        stats.add_micro(LossOutput(loss, dict(base)), mask, torch.zeros(1, 4), None, correction)
    got = stats.summary(torch.tensor(0.0), 0.0)
    assert got[M.TRAIN + K.ROLLOUT_RATIO_MIN] == pytest.approx(0.7)
    assert got[M.TRAIN + K.ROLLOUT_RATIO_MAX] == pytest.approx(1.3)
    assert got[M.TRAIN + K.ROLLOUT_RATIO_MEAN] == pytest.approx((3 * 0.9 + 1.3) / 4)
    assert got[M.TRAIN + K.ROLLOUT_MASKED] == pytest.approx(1 / 4)


def _entropy_by_hand(model, b) -> torch.Tensor:
    logits = model(b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids).logits
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    return torch.nn.functional.pad(-(logp.exp() * logp).sum(-1), (1, 0))


@pytest.mark.parametrize("switch", [{"entropy_coef": 0.1}, {"top_entropy_quantile": 0.5}])
def test_the_entropy_switches_get_their_entropies(switch):
    model, plan = _rollout(seed=1)
    plan.old_logps = plan.rollout.old_logps.double()  # on-policy up to the sampler's float32
    loss_fn = GRPOLoss(beta=0.0, **switch)
    # The entropy quantile is taken over the batch the loss is given, here each micro-batch: only one
    # micro-batch equals the whole batch by hand (the bonus is a token sum, so it splits).
    whole = "top_entropy_quantile" in switch
    got, metrics = _step(model, loss_fn, plan, None, splits=((0, 8),) if whole else ((0, 3), (3, 8)))

    b = plan.rollout
    logps, _ = sequence_logps(model, b.input_ids, b.attention_mask, b.position_ids, b.labels)
    loss_fn(
        logps=logps,
        labels=b.labels,
        advantages=plan.adv.advantages,
        old_logps=plan.old_logps,
        ref_logps=None,
        entropies=_entropy_by_hand(model, b),
    ).loss.backward()
    torch.testing.assert_close(got, _grads(model), rtol=1e-10, atol=1e-12)
    if "top_entropy_quantile" in switch:
        assert 0.0 < metrics[M.TRAIN + K.TOP_ENTROPY_KEPT] < 1.0
    else:  # the bonus moves the gradient: the entropy carried its own
        plain, _ = _step(model, GRPOLoss(beta=0.0), plan, None)
        assert not torch.allclose(got, plain, rtol=1e-6)


def test_the_entropy_gradient_option_gives_the_default_path_s_values():
    model, plan = _rollout(seed=2)
    b = plan.rollout
    args = (model, b.input_ids, b.attention_mask, b.position_ids, b.labels)
    logps, entropy = sequence_logps(*args, temperature=0.7, with_entropy=True)
    logps_g, entropy_g = sequence_logps(*args, temperature=0.7, with_entropy=True, entropy_grad=True)
    assert entropy_g.requires_grad and not entropy.requires_grad
    torch.testing.assert_close(logps_g, logps, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(entropy_g, entropy, rtol=1e-10, atol=1e-12)


def test_the_sampler_copy_rounds_the_current_weights_and_leaves_the_policy():
    torch.manual_seed(0)
    model = tiny_policy(d_model=32, n_layers=1, n_heads=2, max_seq_len=32).model
    assert SamplerCopy(None)(model) is model
    copy = SamplerCopy("bfloat16")
    first = copy(model)
    assert {p.dtype for p in first.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    again = copy(model)
    assert again is first  # refreshed, not rebuilt
    p, q = next(model.parameters()), next(again.parameters())
    assert torch.equal(q, p.to(torch.bfloat16)) and not any(t.requires_grad for t in again.parameters())


def test_a_correction_recomputes_the_old_logps_and_refuses_the_sampler_s():
    model = tiny_policy(d_model=32, n_layers=1, n_heads=2, max_seq_len=32).model
    assert not should_recompute("auto", "32-true", model)
    assert should_recompute("auto", "32-true", model, correction="tis")
    assert should_recompute("auto", "32-true", model, sampler_dtype="bfloat16")
    with pytest.raises(ValueError, match="needs recomputed old log-probs"):
        should_recompute("sampler", "32-true", model, correction="mis")


# --- start-up refusals -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (
            ["optim.rollout_correction.mode=tis", "optim.old_logps=sampler"],
            "optim.rollout_correction.mode=tis with optim.old_logps=sampler: the correction weighs by "
            "recomputed / sampler log-probs, so it needs them recomputed; use optim.old_logps=auto or recompute",
        ),
        (["optim.rollout_correction.upper=0"], "optim.rollout_correction.upper must be > 0, got 0"),
        (
            ["optim.rollout_correction.mode=icepop"],
            "optim.rollout_correction.mode must be one of ['none', 'tis', 'mis', 'seq_mask'], got 'icepop'",
        ),
        (
            ["optim.rollout_correction.mode=mis", "optim.rollout_correction.low=3"],
            "optim.rollout_correction.low=3 > high=2: the kept range [low, high] is empty",
        ),
        (
            ["rollout.sampler_dtype=float8"],
            "rollout.sampler_dtype must be one of ['bfloat16', 'float16'], got 'float8'",
        ),
        (
            ["loss=cispo", "loss.clip_ratio_c=3"],
            "loss=cispo: clip_ratio_c applies to the PPO-clipped objective only, not cispo's",
        ),
        (
            ["loss=clip_cov", "loss.clip_cov_lb=5"],
            "loss=clip_cov: clip_cov_lb (5) must be < clip_cov_ub (5)",
        ),
    ],
)
def test_a_bad_correction_or_loss_relation_is_one_line(hydra_conf, overrides, line):
    assert config_problems(compose(config_name="config", overrides=overrides)) == [line]


def test_the_correction_settings_pass(hydra_conf):
    for mode in ("none", "tis", "mis", "seq_mask"):
        overrides = [f"optim.rollout_correction.mode={mode}", "rollout.sampler_dtype=bfloat16"]
        assert config_problems(compose(config_name="config", overrides=overrides)) == []
