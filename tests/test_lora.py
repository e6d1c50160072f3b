"""LoRA through peft: only adapters train, the base stays bit-identical, and the adapter-disabled reference
is the initial policy (what an explicit copy would be), without copying any weight."""

from __future__ import annotations

import copy
import csv

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

from twinkle_exp.config.schema import AdvantageConfig, OptimConfig, RolloutConfig, TrainerConfig
from twinkle_exp.loss import GRPOLoss, metric_keys
from twinkle_exp.models import LoraSettings
from twinkle_exp.models.lora import fold_adapters, trainable_parameters, trainable_state_dict
from twinkle_exp.policy.build import hf_policy
from twinkle_exp.policy.logprobs import sequence_logps
from twinkle_exp.policy.reference import Reference
from twinkle_exp.rewards import RewardFunction, RewardSet
from twinkle_exp.tasks import AdditionTask
from twinkle_exp.tasks.prompt_stream import PromptStream
from twinkle_exp.training.module import PolicyModule

LORA = LoraSettings(r=4, alpha=8.0)


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def rollout_like_batch(vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """4 rows of 12 tokens: 6 prompt tokens, then completions of 6, 4, 2 and 5 tokens (labels), padding after."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, vocab, (4, 12), generator=g)  # [B, T], ids 0..3 are specials
    attention_mask = torch.zeros(4, 12, dtype=torch.long)
    labels = torch.full((4, 12), -100)
    for row, length in enumerate([6, 4, 2, 5]):
        attention_mask[row, : 6 + length] = 1
        labels[row, 6 : 6 + length] = input_ids[row, 6 : 6 + length]
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])  # [B]
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "labels": labels,
        "advantages": advantages,
    }


def logps_of(model: torch.nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:  # [B, T]
    logps, _ = sequence_logps(model, b["input_ids"], b["attention_mask"], b["position_ids"], b["labels"])
    return logps


def train_steps(model: torch.nn.Module, reference: Reference, b: dict, steps: int, lr: float = 0.05) -> None:
    """`steps` GRPO updates with a KL penalty, the optimizer holding the trainable parameters only."""
    loss_fn = GRPOLoss(beta=0.1)
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=lr)
    model.train()
    for _ in range(steps):
        with reference.weights() as ref_model:
            ref = logps_of(ref_model, b)
        logps = logps_of(model, b)
        out = loss_fn(logps=logps, labels=b["labels"], advantages=b["advantages"], ref_logps=ref)
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        optimizer.step()


def kl_against(model: torch.nn.Module, ref_logps: torch.Tensor, b: dict) -> torch.Tensor:
    with torch.no_grad():
        out = GRPOLoss(beta=0.1)(
            logps=logps_of(model, b), labels=b["labels"], advantages=b["advantages"], ref_logps=ref_logps
        )
    return out.metrics[metric_keys.KL]


def test_only_adapters_require_grad_and_reach_the_optimizer(tiny_hf_dir):
    model = hf_policy(str(tiny_hf_dir), lora=LORA).model
    trainable = dict((n, p) for n, p in model.named_parameters() if p.requires_grad)
    assert trainable and all("lora_" in n for n in trainable)
    assert {id(p) for p in trainable_parameters(model)} == {id(p) for p in trainable.values()}
    # A checkpoint of a LoRA policy holds the adapters only.
    state = {"policy." + k: v for k, v in model.state_dict().items()}
    kept = trainable_state_dict(model, state, prefix="policy.")
    assert set(kept) == {"policy." + n for n in trainable}


def test_lora_steps_change_adapters_only_and_the_free_reference_equals_a_copy(tiny_hf_dir):
    policy = hf_policy(str(tiny_hf_dir), lora=LORA)
    model = policy.model
    b = rollout_like_batch(policy.tokenizer.vocab_size)
    explicit_copy = copy.deepcopy(model).eval()  # what the reference used to be: the initial policy, copied
    base_before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    adapters_before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    reference = Reference.of(model)
    assert reference.shares_policy and reference.model is model  # no copy of any weight
    train_steps(model, reference, b, steps=3)

    for name, before in base_before.items():
        assert torch.equal(dict(model.named_parameters())[name], before), f"base weight {name} moved"
    moved = [
        n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p, adapters_before[n])
    ]
    assert any("lora_B" in n for n in moved), "no adapter weight moved"

    model.eval()
    with reference.weights() as ref_model:
        free = logps_of(ref_model, b)
    with torch.no_grad():
        copied = logps_of(explicit_copy, b)
    torch.testing.assert_close(free, copied, rtol=0, atol=0)
    kl_free, kl_copy = kl_against(model, free, b), kl_against(model, copied, b)
    assert kl_free > 1e-4, "the policy did not move away from the reference, so the KL compares nothing"
    assert torch.equal(kl_free, kl_copy)


def test_adapters_trained_before_the_reference_are_folded_into_it(tiny_hf_dir):
    """A warm-start trains the adapters before the reference exists: the reference must be that policy."""
    policy = hf_policy(str(tiny_hf_dir), lora=LORA)
    model = policy.model
    b = rollout_like_batch(policy.tokenizer.vocab_size, seed=1)
    train_steps(model, Reference.of(copy.deepcopy(model)), b, steps=2)  # the "warm-start"
    model.eval()
    warm = copy.deepcopy(model)
    with torch.no_grad():
        warm_logps = logps_of(warm, b)

    reference = Reference.of(model)
    with torch.no_grad():
        torch.testing.assert_close(logps_of(model, b), warm_logps, rtol=1e-5, atol=1e-5)  # same policy
    with reference.weights() as ref_model:
        torch.testing.assert_close(logps_of(ref_model, b), warm_logps, rtol=1e-5, atol=1e-5)
    assert not fold_adapters(model), "folding left an adapter that is not the identity"
    # The base is no longer the pretrained one, so adapters alone would not restore this policy.
    state = model.state_dict()
    assert trainable_state_dict(model, state) is state


def test_reference_without_lora_is_a_frozen_copy(tiny_hf_dir):
    model = hf_policy(str(tiny_hf_dir)).model
    reference = Reference.of(model)
    assert not reference.shares_policy and reference.model is not model
    assert not any(p.requires_grad for p in reference.model.parameters())
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # training the policy leaves the copy alone
    assert not torch.equal(next(model.parameters()), next(reference.model.parameters()))


def test_a_separate_reference_model_is_loaded_and_must_share_the_vocabulary(tiny_hf_dir, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    policy = hf_policy(str(tiny_hf_dir), lora=LORA, reference_name_or_path=str(tiny_hf_dir))
    reference = Reference.of(policy.model, policy.load_reference)
    assert not reference.shares_policy and type(reference.model).__name__ == "LlamaForCausalLM"

    other = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
        )
    )
    other.save_pretrained(tmp_path / "other")
    policy = hf_policy(str(tiny_hf_dir), reference_name_or_path=str(tmp_path / "other"))
    with pytest.raises(ValueError, match="reference_name_or_path.*50 tokens"):
        Reference.of(policy.model, policy.load_reference)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"r": 0}, "policy.lora.r must be >= 1"),
        ({"alpha": 0.0}, "policy.lora.alpha must be > 0"),
        ({"dropout": 1.0}, "policy.lora.dropout"),
        ({"target_modules": []}, "target_modules is empty"),
        ({"target_modules": ["q_proj", "lm_head"]}, r"\['lm_head'\] cannot be adapted"),
        ({"target_modules": ["all-linear", "q_proj"]}, "stands alone"),
    ],
)
def test_bad_lora_settings_are_refused_by_name(settings, message):
    with pytest.raises(ValueError, match=message):
        LoraSettings(**settings)


def test_lora_from_a_config_mapping_and_unknown_keys(tiny_hf_dir):
    model = hf_policy(str(tiny_hf_dir), lora={"r": 2, "target_modules": ["q_proj", "v_proj"]}).model
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[1] for n, _ in model.named_parameters() if "lora_A" in n}
    assert adapted == {"q_proj", "v_proj"}
    with pytest.raises(ValueError, match=r"policy.lora: unknown settings \['rank'\]"):
        hf_policy(str(tiny_hf_dir), lora={"rank": 2})
    with pytest.raises(ValueError, match="policy.lora.target_modules=.*nope"):
        hf_policy(str(tiny_hf_dir), lora={"target_modules": ["nope"]})


def test_policy_module_trains_lora_adapters_against_the_free_reference(tiny_hf_dir, tmp_path):
    """Through the trainer: the optimizer holds the adapters, the reference is the policy without them, the
    KL is logged, the base does not move, and the checkpoint carries the adapters only."""

    def digit_fraction(prompts, completions, answers):  # dense, so advantages are not all 0
        return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]

    torch.manual_seed(0)
    policy = hf_policy(str(tiny_hf_dir), lora=LoraSettings(r=4, alpha=16.0))
    module = PolicyModule(
        policy,
        AdditionTask(num_validation=4),
        # A random model rarely ends with EOS: score its truncated completions too, so advantages are not 0.
        RewardSet([RewardFunction("digits", digit_fraction)], truncated_max=None),
        GRPOLoss(beta=0.1),
        rollout=RolloutConfig(prompts_per_step=4, group_size=4, max_new_tokens=6),
        advantage=AdvantageConfig(),
        optim=OptimConfig(lr=1e-2, mu=1, num_minibatches=2),
        trainer=TrainerConfig(val_every=10, val_batch_size=4, samples_every=1000),
    )
    assert module.reference is policy.model  # no copy
    base_before = {n: p.detach().clone() for n, p in policy.model.named_parameters() if not p.requires_grad}
    trainer = L.Trainer(
        max_steps=2,
        accelerator="cpu",
        logger=CSVLogger(str(tmp_path), name="", version=""),
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp_path),
    )
    stream = PromptStream(module.task, 4, seed=0)
    trainer.fit(module, train_dataloaders=DataLoader(stream, batch_size=None))
    [optimizer] = trainer.optimizers
    optimized = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert optimized == {id(p) for p in trainable_parameters(policy.model)}
    assert all(torch.equal(dict(policy.model.named_parameters())[n], p) for n, p in base_before.items())

    trainer.save_checkpoint(tmp_path / "last.ckpt")
    saved = torch.load(tmp_path / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    assert saved and all("lora_" in k for k in saved)
    with open(tmp_path / "metrics.csv") as f:
        kl = [float(r["train/kl"]) for r in csv.DictReader(f) if r.get("train/kl")]
    assert kl and kl[-1] > 0  # measured against the adapter-disabled policy, which the update left behind
