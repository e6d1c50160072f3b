"""The sampler's merged copy of a LoRA policy: the policy's function as it is now, its untouched weights shared,
and what it samples equal to what the adapters themselves sample."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")

from hf_helpers import char_level_hf_tokenizer, tiny_qwen2  # noqa: E402

from twinkle_exp.models.hf import HFTokenizerAdapter  # noqa: E402
from twinkle_exp.models.lora import LoraSettings, apply_lora  # noqa: E402
from twinkle_exp.models.merged_copy import MergedCopy, can_merge  # noqa: E402
from twinkle_exp.sampling.generate import SamplingOptions, generate  # noqa: E402
from twinkle_exp.sampling.sampler_copy import SamplerCopy  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py
VOCAB = 40


def lora_policy(seed: int = 0, vocab: int = VOCAB) -> torch.nn.Module:
    model = apply_lora(tiny_qwen2(vocab), LoraSettings(r=4, alpha=8.0))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


def ids() -> dict[str, torch.Tensor]:
    x = torch.randint(4, VOCAB, (3, 9), generator=torch.Generator().manual_seed(2))  # [B, T]
    return {"input_ids": x, "attention_mask": torch.ones_like(x)}


@torch.no_grad()
def test_the_merged_copy_computes_the_policy_and_follows_its_updates() -> None:
    policy = lora_policy()
    merged = MergedCopy()
    copy = merged.refresh(policy)
    assert not can_merge(copy) and not any("lora" in n for n, _ in copy.named_parameters())
    torch.testing.assert_close(copy(**ids()).logits, policy(**ids()).logits, rtol=1e-5, atol=1e-5)
    for name, p in policy.named_parameters():  # an optimizer step's worth of change in the adapters
        if "lora_" in name:
            p.add_(0.05)
    stale = copy(**ids()).logits
    assert merged.refresh(policy) is copy  # refreshed in place, not rebuilt
    fresh = copy(**ids()).logits
    torch.testing.assert_close(fresh, policy(**ids()).logits, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(stale, fresh)


@torch.no_grad()
def test_only_the_adapted_weights_are_copied() -> None:
    policy = lora_policy()
    copy = MergedCopy().refresh(policy)
    own = {p.data_ptr() for p in policy.parameters()}
    copied = [n for n, p in copy.named_parameters() if p.data_ptr() not in own]
    # 2 layers x 7 adapted linears; embeddings (tied head) and norms are the policy's own tensors.
    assert len(copied) == 14 and all(n.endswith("proj.weight") for n in copied)
    with policy.disable_adapter():  # adapters off: the copy is the base model
        torch.testing.assert_close(MergedCopy().refresh(policy)(**ids()).logits, policy(**ids()).logits)


def test_sampling_from_the_merged_copy_draws_what_the_adapters_draw() -> None:
    tokenizer = HFTokenizerAdapter(char_level_hf_tokenizer())
    policy = lora_policy(vocab=len(tokenizer))
    options = SamplingOptions(group_size=4, max_new_tokens=6, temperature=1.0)
    draws = [
        generate(model, tokenizer, ["12+3=", "7+5="], options, generator=torch.Generator().manual_seed(0))
        for model in (policy, SamplerCopy(None, merge_adapters=True)(policy))
    ]
    assert torch.equal(draws[0].input_ids, draws[1].input_ids)
    torch.testing.assert_close(draws[0].old_logps, draws[1].old_logps, rtol=1e-4, atol=1e-5)


def test_the_sampler_merges_only_when_asked_and_only_lora() -> None:
    policy = lora_policy()
    assert can_merge(policy)
    assert SamplerCopy(None)(policy) is policy
    assert SamplerCopy(None, merge_adapters=True)(policy) is not policy
    plain = tiny_qwen2(VOCAB)
    assert not can_merge(plain) and SamplerCopy(None, merge_adapters=True)(plain) is plain
