"""optim.old_logps=auto: when it recomputes, and that the recompute is the first optimizer step's forward.

The on-policy cases train a small random Qwen2 (transformers, char-level tokenizer) in-process for one
strictly on-policy step (mu=1, one minibatch) and read that step's ratio range off metrics.csv.
"""

from __future__ import annotations

import logging

import pytest
import torch
from hf_helpers import char_level_hf_tokenizer
from module_helpers import digit_fraction, fit, update_rows

from twinkle_exp import metric_names as M
from twinkle_exp.config.schema import AdvantageConfig, OptimConfig, RolloutConfig, TrainerConfig
from twinkle_exp.loss import LOSSES
from twinkle_exp.models import build_tiny_qwen2
from twinkle_exp.models.hf import HFTokenizerAdapter, enable_gradient_checkpointing
from twinkle_exp.policy.build import Policy, tiny_policy
from twinkle_exp.rewards import RewardFunction, RewardSet
from twinkle_exp.tasks import AdditionTask
from twinkle_exp.training.module import PolicyModule
from twinkle_exp.training.old_logps import recompute_reasons, should_recompute

ON_POLICY = {"mu": 1, "num_minibatches": 1}


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def qwen2(dtype: torch.dtype = torch.float32, checkpointing: bool = False, hidden: int = 128) -> Policy:
    # Width 128 and 16 new tokens: the smallest size found where, under bf16 autocast on a CPU, a pass that
    # shares prompts and one that does not round differently (at width 64 or 8 tokens they agree bitwise).
    tokenizer = HFTokenizerAdapter(char_level_hf_tokenizer())
    model = build_tiny_qwen2(
        len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=64,
    ).to(dtype)
    if checkpointing:
        enable_gradient_checkpointing(model)
    return Policy(model, tokenizer)


def first_step(tmp_path, policy: Policy, precision: str = "32-true", **optim) -> dict[str, float]:
    module = PolicyModule(
        policy,
        AdditionTask(min_digits=1, max_digits=2, num_validation=8),
        RewardSet([RewardFunction("digits", digit_fraction)], truncated_max=None),
        LOSSES["grpo"](),
        rollout=RolloutConfig(prompts_per_step=4, group_size=4, max_new_tokens=16),
        advantage=AdvantageConfig(),
        optim=OptimConfig(**{"lr": 1e-3} | ON_POLICY | optim),
        trainer=TrainerConfig(val_every=10, val_batch_size=8, samples_every=1000),
    )
    return update_rows(fit(module, tmp_path, max_steps=1, precision=precision))[0]


def ratio_gap(row: dict[str, float]) -> float:
    return max(abs(row[M.RATIO_MIN] - 1), abs(row[M.RATIO_MAX] - 1))


# --- when auto recomputes -------------------------------------------------------------------------------
def test_a_float32_model_without_dropout_keeps_the_sampler_log_probs():
    torch.manual_seed(0)
    model = tiny_policy(d_model=32, n_layers=1, n_heads=2).model
    assert recompute_reasons("32-true", model) == []
    assert not should_recompute("auto", "32-true", model)
    assert should_recompute("recompute", "32-true", model)


@pytest.mark.parametrize(
    "case, expected",
    [
        ("bf16-mixed", "trainer.precision=bf16-mixed"),
        ("16-mixed", "trainer.precision=16-mixed"),
        ("bf16-true", "trainer.precision=bf16-true"),
        ("bfloat16 weights", "bfloat16 parameters"),
        ("float16 weights", "float16 parameters"),
        ("one bfloat16 layer", "bfloat16 parameters"),
        ("dropout", "dropout"),
        ("checkpointing", "gradient checkpointing"),
        ("tf32 matmuls", "float32 matmul precision 'high'"),
    ],
)
def test_auto_recomputes_whenever_the_two_passes_can_differ(case, expected):
    precision = case if "-" in case else "32-true"
    policy = qwen2(hidden=16, checkpointing=case == "checkpointing")
    model = policy.model
    if case.endswith("weights"):
        model.to(getattr(torch, case.split()[0]))
    if case == "one bfloat16 layer":
        model.model.layers[0].mlp.to(torch.bfloat16)
    if case == "dropout":
        model = tiny_policy(d_model=32, n_layers=1, n_heads=2, dropout=0.1).model
    before = torch.get_float32_matmul_precision()
    try:
        if case == "tf32 matmuls":
            torch.set_float32_matmul_precision("high")
        assert expected in recompute_reasons(precision, model)
        assert should_recompute("auto", precision, model)
        assert not should_recompute("sampler", precision, model)
    finally:
        torch.set_float32_matmul_precision(before)


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="optim.old_logps must be one of"):
        should_recompute("Recompute", "32-true", qwen2(hidden=16).model)


# --- the recompute is the update's forward: on-policy ratio 1 -------------------------------------------
def test_bf16_weights_under_32_true_are_on_policy(tmp_path):
    # auto used to look at trainer.precision only, and kept the sampler's log-probs (ratios 0.999-1.001).
    row = first_step(tmp_path, qwen2(torch.bfloat16))
    assert ratio_gap(row) <= 1e-6, row
    assert row[M.LOGP_MISMATCH_MAX] > 1e-4  # the sampler's own log-probs do differ


def test_gradient_checkpointing_under_bf16_autocast_is_on_policy(tmp_path):
    # The recompute used to run in eval mode, where checkpointed layers share prompts, while the update's
    # checkpointed layers train and take the full forward: under bf16 the two rounded apart (0.9925-1.003).
    row = first_step(tmp_path, qwen2(checkpointing=True), precision="bf16-mixed")
    assert ratio_gap(row) <= 1e-6, row


def test_checkpointing_bf16_weights_and_micro_batches_are_on_policy(tmp_path):
    # Two minibatches of two micro-batches each: the first step's own micro-batches are the recompute's.
    row = first_step(
        tmp_path,
        qwen2(torch.bfloat16, checkpointing=True),
        mu=1,
        num_minibatches=2,
        micro_batch_size=3,
    )
    assert ratio_gap(row) <= 1e-6, row


def test_the_sampler_mode_warns_and_is_not_on_policy(tmp_path, caplog):
    # What the recompute replaces, so the tests above cannot pass by accident.
    with caplog.at_level(logging.WARNING, logger="twinkle_exp.training.module"):
        row = first_step(tmp_path, qwen2(torch.bfloat16), old_logps="sampler")
    assert ratio_gap(row) > 1e-4, row
    assert "optim.old_logps=sampler with bfloat16 parameters" in caplog.text


def test_checkpointed_layers_that_apply_dropout_themselves_drop_nothing_in_the_update():
    # OPT's decoder layer applies config.dropout itself from its own training flag, which the update marks
    # as training to keep checkpointing on: its dropout used to run in every update and recompute.
    import transformers

    from twinkle_exp.models.hf import set_update_mode

    config = transformers.OPTConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        ffn_dim=32,
        num_attention_heads=2,
        max_position_embeddings=32,
        word_embed_proj_dim=16,
        dropout=0.3,
    )
    torch.manual_seed(0)
    model = transformers.OPTForCausalLM(config)
    enable_gradient_checkpointing(model)
    ids = torch.randint(3, 50, (2, 8))
    set_update_mode(model, dropout=False)
    assert torch.equal(model(ids).logits, model(ids).logits)
    set_update_mode(model, dropout=True)  # optim.update_dropout=true: the layers' own rate is back
    assert not torch.equal(model(ids).logits, model(ids).logits)
    assert model.model.decoder.layers[0].dropout == 0.3
