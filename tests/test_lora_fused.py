"""The fused LoRA linear layer computes peft's function and gradients, and gives way to peft's forward
wherever it does not apply (adapters disabled or merged, dropout, autocast)."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("peft")

from hf_helpers import tiny_qwen2  # noqa: E402

from twinkle_exp.models.lora import LoraSettings, apply_lora  # noqa: E402
from twinkle_exp.models.lora_fused import _fused_class, _LoraLinearFn, fuse_lora_layers  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py
VOCAB = 40


def random_b(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """B random instead of peft's zeros, so that the adapters take part in the function."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model


def pair(dropout: float = 0.0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same LoRA model twice: peft's forward, and the fused one."""
    settings = dict(r=4, alpha=8.0, dropout=dropout)
    plain = random_b(apply_lora(tiny_qwen2(VOCAB), LoraSettings(**settings, fused=False)))
    fused = random_b(apply_lora(tiny_qwen2(VOCAB), LoraSettings(**settings, fused=True)))
    fused.load_state_dict(plain.state_dict())
    return plain, fused


def batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, VOCAB, (3, 10), generator=g)  # [B, T]
    mask = torch.ones_like(ids)
    mask[2, 7:] = 0  # a padded row
    return {"input_ids": ids, "attention_mask": mask}


def loss_and_grads(model: torch.nn.Module, b: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    logits = model(**b).logits  # [B, T, V]
    loss = (logits.log_softmax(-1)[..., 5] * b["attention_mask"]).sum()
    loss.backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_fuse_swaps_every_adapted_linear_and_keeps_the_state_dict() -> None:
    plain, fused = pair()
    fused_cls = _fused_class()
    swapped = [m for m in fused.modules() if isinstance(m, fused_cls)]
    # 2 layers x 7 linear layers (q, k, v, o, gate, up, down), none of them plain peft any more.
    assert len(swapped) == 14
    assert not any(isinstance(m, fused_cls) for m in plain.modules())
    assert list(fused.state_dict()) == list(plain.state_dict())
    assert fuse_lora_layers(fused) == 0  # already fused: nothing left to swap


def test_fused_forward_and_gradients_equal_peft() -> None:
    plain, fused = pair()
    b = batch()
    logits_p, grads_p = loss_and_grads(plain, b)
    logits_f, grads_f = loss_and_grads(fused, b)
    torch.testing.assert_close(logits_f, logits_p, rtol=1e-5, atol=1e-5)
    assert grads_f.keys() == grads_p.keys() and any("lora_A" in n for n in grads_f)
    for name in grads_p:
        torch.testing.assert_close(grads_f[name], grads_p[name], rtol=1e-4, atol=1e-6, msg=name)


def test_function_gradients_against_finite_differences() -> None:
    """Every input's gradient, the frozen weight's and bias's too, in float64."""
    g = torch.Generator().manual_seed(1)
    args = [
        torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True)
        for s in [(2, 3, 5), (4, 5), (4,), (2, 5), (4, 2)]
    ]  # x [.., in], W [out, in], b [out], A [r, in], B [out, r]
    assert torch.autograd.gradcheck(lambda *a: _LoraLinearFn.apply(*a, 1.5), args)


def test_disabled_adapters_give_the_base_model() -> None:
    base = tiny_qwen2(VOCAB)
    expected = base(**batch()).logits
    fused = random_b(apply_lora(copy.deepcopy(base), LoraSettings(r=4, alpha=8.0)))
    with torch.no_grad():
        assert not torch.allclose(fused(**batch()).logits, expected)  # the adapters change the function
        with fused.disable_adapter():
            torch.testing.assert_close(fused(**batch()).logits, expected)


def test_peft_forward_runs_where_the_fused_one_does_not_apply(monkeypatch) -> None:
    """Dropout, merged adapters and autocast take peft's own path, which gives its own results."""
    calls = []

    def refuse(*args):
        calls.append(args)
        raise AssertionError("the fused path ran")

    monkeypatch.setattr(_LoraLinearFn, "apply", refuse)
    _, fused = pair(dropout=0.1)
    fused.eval()
    with torch.no_grad():
        fused(**batch())  # dropout configured: peft's forward (a no-op in eval, but peft's)
    assert calls == []
    _, fused = pair()
    fused.merge_adapter()
    with torch.no_grad():
        fused(**batch())
    assert calls == []
    fused.unmerge_adapter()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        fused(**batch())
    assert calls == []
    with pytest.raises(AssertionError):  # and the fused path is taken otherwise
        fused(**batch())


def test_a_deep_copy_computes_with_its_own_weights() -> None:
    _, fused = pair()
    twin = copy.deepcopy(fused)
    with torch.no_grad():
        for name, p in twin.named_parameters():
            if "lora_B" in name:
                p.zero_()
        with twin.disable_adapter():
            base = twin(**batch()).logits
        torch.testing.assert_close(twin(**batch()).logits, base)  # the twin's zeroed adapters
        assert not torch.allclose(fused(**batch()).logits, base)  # the original's are untouched
