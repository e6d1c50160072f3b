"""On-policy ratios are exactly 1 under bf16 and dropout; clipping sees unscaled gradients; steps add up.

Each on-policy case trains the built-in policy in-process for one rollout (mu=1, one minibatch: strictly
on-policy), from a short supervised warm-start on `reverse`: bf16 rounding moves a trained model's sampled
log-probs visibly (~1e-3 here), a random one's barely (~1e-7).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from module_helpers import fit, make_module, update_rows
from torch import nn

from twinkle_exp import metric_names as M
from twinkle_exp.loss import LOSSES
from twinkle_exp.loss import metric_keys as K
from twinkle_exp.models import CharTokenizer
from twinkle_exp.policy.build import Policy
from twinkle_exp.rewards import RewardFunction, RewardSet, exact_match
from twinkle_exp.sampling.generate import SamplingOptions, generate
from twinkle_exp.tasks import ReverseTask
from twinkle_exp.training.warmup import supervised_train

ON_POLICY = {"mu": 1, "num_minibatches": 1}
CLIP_KEYS = [M.TRAIN + k for k in (K.CLIP_LOW, K.CLIP_HIGH, K.CLIP_REGION)]
CASES = {"bf16": {"precision": "bf16-mixed"}, "dropout": {"dropout": 0.1}}
# The built-in policy's default size: at width 32 bf16 rounding barely moves the sampler's log-probs.
MODEL = {"d_model": 128, "n_layers": 2, "n_heads": 4}
REVERSE = ReverseTask(max_len=6, num_validation=8)


@pytest.fixture(scope="module")
def warm_weights() -> dict[str, torch.Tensor]:
    module = make_module(LOSSES["grpo"](), model=MODEL, task=REVERSE)
    supervised_train(
        Policy(module.policy, module.tokenizer), REVERSE, steps=80, batch_size=64, lr=1e-3, seed=0
    )
    return module.policy.state_dict()


def _on_policy_step(tmp_path, warm_weights, name: str, case: str, **optim) -> dict[str, float]:
    loss_kwargs = {"beta": 0.01} | ({"max_completion_length": 8} if name == "drgrpo" else {})
    dropout = CASES[case].get("dropout", 0.0)
    module = make_module(
        LOSSES[name](**loss_kwargs), dropout=dropout, model=MODEL, task=REVERSE, **ON_POLICY | optim
    )
    module.policy.load_state_dict(warm_weights)
    [row] = update_rows(fit(module, tmp_path, max_steps=1, precision=CASES[case].get("precision", "32-true")))
    return row


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_on_policy_ratio_is_one_and_nothing_clips(tmp_path, warm_weights, name, case):
    row = _on_policy_step(tmp_path, warm_weights, name, case)
    assert abs(row[M.TRAIN + K.RATIO_MIN] - 1) <= 1e-6 and abs(row[M.TRAIN + K.RATIO_MAX] - 1) <= 1e-6, row
    assert all(row[key] == 0 for key in CLIP_KEYS), row
    # The sampler's own log-probs are still measured against the update's forward, and do differ.
    assert row[M.LOGP_MISMATCH_MAX] > 0


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_sampler_log_probs_are_not_on_policy_under_bf16_or_dropout(tmp_path, warm_weights, case):
    # The behaviour the recomputation replaces, so the test above cannot pass by accident.
    row = _on_policy_step(tmp_path, warm_weights, "grpo", case, old_logps="sampler", update_dropout=True)
    assert row[M.TRAIN + K.RATIO_MAX] - row[M.TRAIN + K.RATIO_MIN] > 1e-4, row


def _fp16_plugins() -> list:
    # Lightning turns `precision="16-mixed"` into bf16 on CPU; an explicit fp16 plugin keeps fp16 autocast and
    # the GradScaler, whose scaled gradients are what clipping must not see.
    from lightning.pytorch.plugins.precision import MixedPrecision

    return [MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))]


@pytest.mark.slow
def test_fp16_clips_the_unscaled_gradients(tmp_path):
    # A small max_grad_norm so clipping binds; fp16 autocast must give the fp32 update up to its rounding.
    runs = {}
    for name, plugins in (("fp32", None), ("fp16", _fp16_plugins())):
        module = make_module(LOSSES["grpo"](beta=0.0), max_grad_norm=0.05, **ON_POLICY)
        [row] = update_rows(fit(module, tmp_path / name, max_steps=1, plugins=plugins))
        assert (getattr(module.trainer.precision_plugin, "scaler", None) is not None) == (name == "fp16")
        runs[name] = (row[M.GRAD_NORM], [p.detach().clone() for p in module.policy.parameters()])
    (norm32, weights32), (norm16, weights16) = runs["fp32"], runs["fp16"]
    assert norm32 > 0.05  # clipping was active
    assert abs(norm16 - norm32) / norm32 < 0.05, (norm16, norm32)  # scaled gradients would be ~65536x
    torch.manual_seed(0)
    initial = [p.detach() for p in make_module(LOSSES["grpo"](), **ON_POLICY).policy.parameters()]
    moved = sum(float((w - p).abs().sum()) for w, p in zip(weights32, initial, strict=True))
    gap = sum(float((a - b).abs().sum()) for a, b in zip(weights16, weights32, strict=True))
    assert gap < 0.05 * moved, (gap, moved)


@pytest.mark.slow
def test_max_steps_is_reached_exactly_with_one_row_per_optimizer_step(tmp_path):
    module = make_module(LOSSES["grpo"](), mu=2, num_minibatches=2)  # 4 steps per rollout
    rows = update_rows(fit(module, tmp_path, max_steps=6))
    assert module.trainer.global_step == 6 and module.rollouts_done == 2
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5, 6]
    lrs = {r[M.LEARNING_RATE] for r in rows}
    assert lrs == {1e-3}  # the rate each step used (no schedule warm-up here)
    assert all(M.ENTROPY in r and M.GRAD_NORM in r for r in rows)


@pytest.mark.slow
def test_the_minibatch_count_is_the_one_asked(tmp_path):
    module = make_module(LOSSES["grpo"](), mu=1, num_minibatches=5)  # 16 rows: 4, 3, 3, 3, 3
    assert len(update_rows(fit(module, tmp_path, max_steps=5))) == 5
    with pytest.raises(ValueError, match="num_minibatches=17"):
        make_module(LOSSES["grpo"](), num_minibatches=17)


# --- rewards see the completion as sampled --------------------------------------------------------------
TOK = CharTokenizer()


class Scripted(nn.Module):
    """Emits `script` (token ids) after a prompt of `prompt_len` tokens, whatever came before."""

    def __init__(self, script: list[int], prompt_len: int):
        super().__init__()
        self.script, self.prompt_len = script, prompt_len
        self.anchor = nn.Parameter(torch.zeros(1))  # generate() reads the device off a parameter

    def forward(
        self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False
    ):
        logits = torch.zeros(*input_ids.shape, TOK.vocab_size)
        index = (position_ids + 1 - self.prompt_len).clamp(0, len(self.script) - 1)  # predicts position + 1
        logits.scatter_(-1, torch.tensor(self.script)[index][..., None], 50.0)
        return SimpleNamespace(logits=logits, past_key_values=None)


def _sample(text_ids: list[int], max_new_tokens: int):
    prompt = "rev:abc="
    model = Scripted(text_ids, prompt_len=len(prompt) + 1)  # + BOS
    return generate(model, TOK, [prompt], SamplingOptions(max_new_tokens=max_new_tokens, greedy=True)), prompt


def test_special_tokens_inside_a_completion_are_kept_for_the_reward():
    c, b, a = TOK.encode("cba")
    batch, prompt = _sample([c, TOK.pad_token_id, b, TOK.bos_token_id, a, TOK.eos_token_id], 8)
    assert batch.completions == ["c<pad>b<bos>a"] and not batch.truncated.any()
    assert exact_match([prompt], batch.completions, ["cba"]) == [0.0]


def test_a_completion_without_eos_is_truncated_and_not_exact():
    batch, prompt = _sample(TOK.encode("cba") + [TOK.eos_token_id], 3)  # the budget ends before EOS
    assert batch.completions == ["cba"] and batch.truncated.tolist() == [True]
    rewards = RewardSet([RewardFunction("exact", exact_match)])
    total, raw = rewards([prompt], batch.completions, ["cba"], batch.truncated)
    assert total.tolist() == [0.0] and raw["exact"].tolist() == [1.0]  # capped at reward.truncated_max = 0
    uncapped = RewardSet([RewardFunction("exact", exact_match)], truncated_max=None)
    assert uncapped([prompt], batch.completions, ["cba"], batch.truncated)[0].tolist() == [1.0]
