"""Two losses' gradients on the same batch (training/gradient_pair.py): a loss against itself, its negation
and its double; the per-token weights against GRPO's and BNPO's on-policy formulas; the gradient is the one
an optimizer step on the same rows takes, with what the step adds to the loss (rollout correction,
per-token advantages, the sampler's log-probs); and the command along a tiny run."""

from __future__ import annotations

import math

import module_helpers
import pytest
import torch

from twinkle_exp.config.schema import RolloutCorrectionConfig
from twinkle_exp.loss import BNPOLoss, GRPOLoss
from twinkle_exp.loss.advantages import AdvantageSettings, token_shaping
from twinkle_exp.loss.core import LossOutput
from twinkle_exp.models.hf import set_update_mode
from twinkle_exp.tasks.prompt_stream import PromptStream
from twinkle_exp.training import gradient_pair as G
from twinkle_exp.training import rl_step
from twinkle_exp.training.micro_loss import LossExtras
from twinkle_exp.training.update_step import accumulate_gradients

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


class _Scaled:
    """`factor` x the wrapped loss, with what the `LossFn` protocol declares (-1: its negation)."""

    def __init__(self, inner, factor: float) -> None:
        self.inner, self.factor = inner, factor
        self.beta, self.needs_entropy, self.entropy_grad = inner.beta, inner.needs_entropy, inner.entropy_grad
        self.zero_advantage_inert = inner.zero_advantage_inert

    def __call__(self, **inputs) -> LossOutput:
        out = self.inner(**inputs)
        return LossOutput(self.factor * out.loss, out.metrics)


def _plan(loss=None, module=None):
    module = module or module_helpers.make_module(loss or GRPOLoss(), old_logps="recompute")
    module.parts.recompute_old_logps = True
    module.state.start(torch.device("cpu"), 0, rank=0)
    batch = next(iter(PromptStream(module.task, module.rollout_cfg.prompts_per_step, seed=0)))

    def draw(prompts):
        return rl_step.sample(module.parts, prompts, module.generators.sampler)

    plan = rl_step.new_rollout(module.parts, batch, 0, draw, module.generators.shuffler)
    set_update_mode(module.policy, dropout=False)
    return module, plan


def _compare(module, plan, losses, rows=None):
    rows = plan.steps[0] if rows is None else rows
    a, b = G.gradients(module.policy, losses, plan, rows, plan.rollout.temperature)
    return a, b, G.compare(a, b, plan.rollout.completion_mask[rows])


def test_a_loss_against_itself_its_negation_and_its_double():
    module, plan = _plan()
    grpo = GRPOLoss()
    _, _, same = _compare(module, plan, [grpo, grpo])
    assert same[G.COSINE] == pytest.approx(1.0, abs=1e-12) and same[G.NORM_RATIO] == pytest.approx(
        1.0, abs=1e-12
    )
    assert same[G.WEIGHTS_DIFFER] == 0.0 and same[G.WEIGHTS_DIFFER_SCALED] == 0.0 and same[G.NORM_A] > 0
    _, _, negated = _compare(module, plan, [grpo, _Scaled(grpo, -1.0)])
    assert negated[G.COSINE] == pytest.approx(-1.0, abs=1e-12)
    assert negated[G.NORM_RATIO] == pytest.approx(1.0, abs=1e-12)
    assert negated[G.WEIGHTS_DIFFER_SCALED] == 0.0  # one scalar (-1) maps one onto the other
    a, _, _ = _compare(module, plan, [grpo, grpo])
    mask = plan.rollout.completion_mask[plan.steps[0]]
    share_nonzero = float((a.token_weights[mask] != 0).sum()) / int(mask.sum())
    assert negated[G.WEIGHTS_DIFFER] == pytest.approx(share_nonzero) and share_nonzero > 0.5
    _, _, double = _compare(module, plan, [grpo, _Scaled(grpo, 2.0)])
    assert double[G.NORM_RATIO] == pytest.approx(2.0, rel=1e-12) and double[G.COSINE] == pytest.approx(
        1.0, abs=1e-12
    )
    assert double[G.NORM_B] == pytest.approx(2 * double[G.NORM_A], rel=1e-12)


def test_the_token_weights_are_grpos_and_bnpos_on_policy_formulas():
    """On-policy (r = 1, nothing clipped): GRPO's dL/dlogp_it = -A_i / (N |o_i|), BNPO's -A_i / sum |o_j|."""
    module, plan = _plan()
    rows = plan.steps[0]
    labels = plan.rollout.labels
    # A random policy rarely ends early: every completion has the budget's length L, where both weights
    # are -A_i / (N L): the two losses are the same.
    assert len(set(plan.rollout.completion_lengths[rows].tolist())) == 1
    _, _, equal = _compare(module, plan, [GRPOLoss(), BNPOLoss()], rows)
    assert equal[G.WEIGHTS_DIFFER] == 0.0 and equal[G.WEIGHTS_DIFFER_SCALED] == 0.0
    assert equal[G.COSINE] == pytest.approx(1.0, abs=1e-9)
    # Completions of 8, 6, 8, 6, ... tokens (the last two of every other row unscored): the scalar is gone.
    labels[rows[1::2], -2:] = -100
    a, b, got = _compare(module, plan, [GRPOLoss(), BNPOLoss()], rows)
    mask = plan.rollout.completion_mask[rows].double()
    adv = plan.adv.advantages[rows].double()[:, None]
    lengths = mask.sum(1, keepdim=True)
    grpo = -adv / (len(rows) * lengths) * mask
    bnpo = -adv / mask.sum() * mask
    assert torch.allclose(a.token_weights.double(), grpo, atol=1e-7, rtol=1e-5)
    assert torch.allclose(b.token_weights.double(), bnpo, atol=1e-7, rtol=1e-5)
    # Every token of a row with an advantage has weights 1/(N |o_i|) against 1/sum |o_j|, which differ.
    with_advantage = float(((adv != 0) * mask).sum() / mask.sum())
    assert got[G.WEIGHTS_DIFFER] == pytest.approx(with_advantage) and with_advantage > 0.5
    assert got[G.WEIGHTS_DIFFER_SCALED] > 0.2
    # The cosine of the two weight vectors through the same Jacobian: below 1, not far.
    assert 0.5 < got[G.COSINE] < 1.0 - 1e-6


def _stepped_gradient(module, loss, plan, rows, extras) -> torch.Tensor:
    module.policy.zero_grad(set_to_none=True)
    accumulate_gradients(
        module.policy, loss, plan, [(rows, None)], temperature=plan.rollout.temperature,
        guard=module.state.nonfinite, backward=torch.Tensor.backward, sampler_gap=False, extras=extras,
    )  # fmt: skip
    return torch.cat([p.grad.reshape(-1) for p in module.policy.parameters() if p.requires_grad])


def test_the_gradient_is_the_one_an_optimizer_step_on_the_same_rows_takes():
    module, plan = _plan()
    rows = plan.steps[0]
    [a] = G.gradients(module.policy, [GRPOLoss()], plan, rows, plan.rollout.temperature)
    assert torch.allclose(
        a.flat, _stepped_gradient(module, GRPOLoss(), plan, rows, None), atol=1e-7, rtol=1e-5
    )


CORRECTED = LossExtras(correction=RolloutCorrectionConfig(mode="tis", upper=1.02))
SHAPED = LossExtras(token_advantages=token_shaping("entropy_shaped", AdvantageSettings(entropy_alpha=0.4)))


@pytest.mark.parametrize(
    ("loss", "extras"),
    [
        (GRPOLoss(), CORRECTED),  # the rollout correction's weights
        (GRPOLoss(), SHAPED),  # per-token advantages from the entropies
        (GRPOLoss(off_policy_mask_threshold=0.0), LossExtras()),  # the mask reads the sampler's log-probs
    ],
    ids=["rollout-correction", "token-shaped-advantages", "off-policy-mask"],
)
def test_the_comparison_sees_what_the_step_adds_to_the_loss(loss, extras):
    module, plan = _plan()
    rows = plan.steps[0]
    # A sampler whose log-probs differ from the recomputed old ones, so weights and the mask act.
    gen = torch.Generator().manual_seed(3)
    mask = plan.rollout.completion_mask
    plan.rollout.old_logps.add_(0.05 * torch.randn(mask.shape, generator=gen) * mask)
    plain = _stepped_gradient(module, GRPOLoss(), plan, rows, None)
    stepped = _stepped_gradient(module, loss, plan, rows, extras)
    assert not torch.allclose(plain, stepped, atol=1e-6, rtol=1e-3)  # what the step adds changes the update
    [a] = G.gradients(module.policy, [loss], plan, rows, plan.rollout.temperature, extras)
    assert torch.allclose(a.flat, stepped, atol=1e-7, rtol=1e-5)


def test_compare_refuses_gradients_of_different_models():
    one = G.Gradient(torch.ones(3), torch.ones(2, 2))
    other = G.Gradient(torch.ones(4), torch.ones(2, 2))
    with pytest.raises(ValueError, match="different shapes"):
        G.compare(one, other, torch.ones(2, 2, dtype=torch.bool))


def test_a_zero_gradient_has_no_cosine():
    zero = G.Gradient(torch.zeros(3), torch.zeros(1, 2))
    out = G.compare(zero, zero, torch.ones(1, 2, dtype=torch.bool))
    assert math.isnan(out[G.COSINE]) and math.isnan(out[G.NORM_RATIO])


@pytest.mark.slow
def test_the_command_compares_along_a_tiny_run(tmp_path, capsys):
    from diagnose import gradients

    out = tmp_path / "grads.csv"
    overrides = ["debug=fast", "warmup=none", "trainer.max_steps=6", "loss=grpo"]
    gradients.main(["--against", "loss=grpo", "--out", str(out), *overrides])
    lines = out.read_text().splitlines()
    assert lines[0].split(",") == list(gradients.CSV_COLUMNS) and len(lines) == 7
    printed = capsys.readouterr().out
    assert "grad_cosine" in printed and "(6 steps)" in printed
    for line in lines[1:]:
        row = dict(zip(gradients.CSV_COLUMNS, line.split(","), strict=True))
        assert float(row[G.COSINE]) == pytest.approx(1.0, abs=1e-9) and float(row[G.WEIGHTS_DIFFER]) == 0.0


def test_the_comparison_runs_through_checkpointed_grouped_query_layers():
    # A checkpointed layer replays its forward inside the backward: both must take one attention path (the
    # replay outside the grouped-query setting copied the keys and values, and torch refused their shapes).
    from hf_helpers import char_level_hf_tokenizer

    from twinkle_exp.config.schema import AdvantageConfig, OptimConfig, RolloutConfig, TrainerConfig
    from twinkle_exp.models import build_tiny_qwen2
    from twinkle_exp.models.hf import HFTokenizerAdapter, enable_gradient_checkpointing
    from twinkle_exp.policy.build import Policy
    from twinkle_exp.rewards import RewardFunction, RewardSet
    from twinkle_exp.tasks import AdditionTask
    from twinkle_exp.training.module import PolicyModule

    tokenizer = HFTokenizerAdapter(char_level_hf_tokenizer())
    model = build_tiny_qwen2(
        len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_layers=1,
        num_heads=4,
        num_kv_heads=2,  # two query heads share each key/value head
        max_position_embeddings=64,
    )
    enable_gradient_checkpointing(model)
    module = PolicyModule(
        Policy(model, tokenizer),
        AdditionTask(min_digits=1, max_digits=2, num_validation=8),
        RewardSet([RewardFunction("digits", module_helpers.digit_fraction)], truncated_max=None),
        GRPOLoss(),
        rollout=RolloutConfig(prompts_per_step=4, group_size=4, max_new_tokens=8),
        advantage=AdvantageConfig(),
        optim=OptimConfig(),
        trainer=TrainerConfig(val_every=10, val_batch_size=8, samples_every=1000),
    )
    module, plan = _plan(module=module)
    # The checkpointed layers train (set_update_mode): the replay happens in the comparison's backward.
    assert any(getattr(m, "gradient_checkpointing", False) is True and m.training for m in model.modules())
    grpo = GRPOLoss()
    _, _, same = _compare(module, plan, [grpo, grpo])
    assert same[G.COSINE] == pytest.approx(1.0, abs=1e-9) and same[G.NORM_A] > 0
