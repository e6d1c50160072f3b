"""`sequence_logps` from hidden states equals the logits path for every policy kind, without calling the head."""

from __future__ import annotations

import pytest
import torch
from hf_helpers import tiny_qwen2, with_lora

from twinkle_exp.logprobs import IGNORE_INDEX, shift_logits_to_labels, token_entropy
from twinkle_exp.models import TinyCausalLM, build_tiny_hf_model
from twinkle_exp.models.backbone import output_head
from twinkle_exp.policy.logprobs import sequence_logps

V = 40
TEMPERATURE = 0.8


def ragged_batch(seed: int = 0):
    """Three rows laid out as a RolloutBatch: left-padded prompts of 2-4 tokens, completions of 1-4 tokens,
    right padding; labels are the completion tokens, -100 elsewhere."""
    gen = torch.Generator().manual_seed(seed)
    prompts, completions, width = [2, 4, 3], [4, 1, 3], 8
    ids = torch.zeros(3, width, dtype=torch.long)
    mask, positions = torch.zeros_like(ids), torch.zeros_like(ids)
    labels = torch.full_like(ids, IGNORE_INDEX)
    p_max = max(prompts)
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        real = slice(p_max - p, p_max + c)
        ids[i, real] = torch.randint(3, V, (p + c,), generator=gen)
        mask[i, real] = 1
        positions[i, real] = torch.arange(p + c)
        labels[i, p_max : p_max + c] = ids[i, p_max : p_max + c]
    return ids, mask, positions, labels


def logits_path(model, ids, mask, positions, labels):
    logits = model(ids, attention_mask=mask, position_ids=positions).logits
    logps = shift_logits_to_labels(logits, labels, temperature=TEMPERATURE)
    entropy = torch.nn.functional.pad(token_entropy(logits[:, :-1].float(), temperature=TEMPERATURE), (1, 0))
    return logps, entropy.masked_fill(labels == IGNORE_INDEX, 0.0)


def count_head_calls(model) -> list[int]:
    calls = [0]
    model.get_output_embeddings().register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def assert_matches_logits_path(model, *, hidden_path: bool = True):
    """Values, entropy and parameter gradients of sequence_logps equal the logits path's (float64)."""
    batch = ragged_batch()
    labels = batch[-1]
    params = [p for p in model.parameters() if p.requires_grad]
    calls = count_head_calls(model)
    logps, entropy = sequence_logps(model, *batch, temperature=TEMPERATURE, with_entropy=True)
    assert calls[0] == (0 if hidden_path else 1)
    ref_logps, ref_entropy = logits_path(model, *batch)
    torch.testing.assert_close(logps, ref_logps, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(entropy.double(), ref_entropy.double(), atol=1e-6, rtol=1e-6)
    assert (logps[labels == IGNORE_INDEX] == 0).all()
    upstream = torch.randn(labels.shape, dtype=logps.dtype, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad((logps * upstream).sum(), params)
    ref_grads = torch.autograd.grad((ref_logps * upstream).sum(), params)
    for g, ref in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, ref, atol=1e-10, rtol=1e-10)


def test_tiny_policy_tied_head():
    torch.manual_seed(0)
    model = TinyCausalLM(V, d_model=16, n_layers=2, n_heads=2, max_seq_len=16, dropout=0.0).double()
    assert model.lm_head.weight is model.tok_emb.weight
    assert_matches_logits_path(model)


def test_tiny_policy_hidden_states_are_the_heads_input():
    torch.manual_seed(0)
    model = TinyCausalLM(V, d_model=16, n_layers=1, n_heads=2, max_seq_len=16, dropout=0.0)
    ids, mask, positions, _ = ragged_batch()
    hidden = model.hidden_states(ids, mask, positions)
    logits = model(ids, attention_mask=mask, position_ids=positions).logits
    torch.testing.assert_close(model.lm_head(hidden), logits)


def tiny_hf(kind: str):
    pytest.importorskip("transformers")
    if kind == "llama":  # untied head
        return build_tiny_hf_model(V, hidden_size=16, intermediate_size=32, num_heads=2).double()
    return tiny_qwen2(V).double()


@pytest.mark.parametrize("kind", ["llama", "qwen2_tied"])
def test_hf_policy(kind):
    model = tiny_hf(kind)
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert tied == (kind == "qwen2_tied")
    assert_matches_logits_path(model)


def test_peft_lora_policy_and_its_disabled_adapters():
    pytest.importorskip("peft")
    model = with_lora(
        tiny_hf("llama"), ["q_proj", "v_proj", "down_proj"]
    )  # disabling them changes the function
    assert_matches_logits_path(model)
    with torch.no_grad(), model.disable_adapter():
        logps, _ = sequence_logps(model, *ragged_batch(), temperature=TEMPERATURE)
        ref, _ = logits_path(model, *ragged_batch())
        on, _ = sequence_logps(model.get_base_model(), *ragged_batch(), temperature=TEMPERATURE)
    torch.testing.assert_close(logps, ref, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(on, ref, atol=1e-10, rtol=1e-10)
    adapted, _ = sequence_logps(model, *ragged_batch(), temperature=TEMPERATURE)
    assert not torch.allclose(adapted, logps)


def test_lora_on_the_head_takes_the_logits_path():
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(tiny_hf("llama"), peft.LoraConfig(r=4, target_modules=["lm_head"]))
    assert output_head(model) is None
    assert_matches_logits_path(model, hidden_path=False)


def test_prompt_tuning_takes_the_logits_path():
    peft = pytest.importorskip("peft")
    config = peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=2)
    model = peft.get_peft_model(tiny_hf("llama"), config)
    assert output_head(model) is None


def test_a_model_that_rescales_its_logits_takes_the_logits_path():
    transformers = pytest.importorskip("transformers")
    config = transformers.CohereConfig(
        vocab_size=V,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        logit_scale=0.5,
    )
    torch.manual_seed(0)
    model = transformers.CohereForCausalLM(config).double()
    assert output_head(model) is None
    assert_matches_logits_path(model, hidden_path=False)


def test_no_grad_pass_matches():
    model = tiny_hf("llama")
    with torch.no_grad():
        logps, entropy = sequence_logps(model, *ragged_batch(), temperature=TEMPERATURE)
    ref, _ = logits_path(model, *ragged_batch())
    assert entropy is None and not logps.requires_grad
    torch.testing.assert_close(logps, ref.detach(), atol=1e-10, rtol=1e-10)
