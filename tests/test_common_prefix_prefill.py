"""The sampler's prefill runs the columns every prompt starts with once (`generate.shared_columns`): the same
tokens and log-probs as prefilling each prompt whole."""

from __future__ import annotations

import pytest
import torch
from hf_helpers import tiny_qwen2

from twinkle_exp.models import CharTokenizer, build_tiny_hf_model, encode_prompt
from twinkle_exp.sampling import generate as generate_module
from twinkle_exp.sampling.generate import (
    MIN_SHARED_COLUMNS,
    Decoding,
    SamplingOptions,
    generate,
    left_pad,
    shared_columns,
)

pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py

TOK = CharTokenizer()
# A common head of more than MIN_SHARED_COLUMNS, then prompts of one length that differ: no left padding.
HEAD = "Question: what is the sum "
PROMPTS = [HEAD + "12+34?", HEAD + "56+78?", HEAD + "90+11?"]


def test_shared_columns_stop_at_the_first_difference_at_left_padding_and_below_the_minimum():
    cpu, n = torch.device("cpu"), MIN_SHARED_COLUMNS
    head = list(range(1, n + 1))
    ids, mask = left_pad([head + [7, 1], head + [8, 2]], pad_id=0, device=cpu)
    assert shared_columns(ids, mask) == n
    same, same_mask = left_pad([head + [7], head + [7]], pad_id=0, device=cpu)
    assert shared_columns(same, same_mask) == n  # never the last column: each row needs its logits
    short, short_mask = left_pad([head[:-1] + [7, 1], head[:-1] + [8, 2]], pad_id=0, device=cpu)
    assert shared_columns(short, short_mask) == 0
    ragged, ragged_mask = left_pad([head + [7, 1], head + [7]], pad_id=0, device=cpu)
    assert shared_columns(ragged, ragged_mask) == 0
    assert shared_columns(ids[:1], mask[:1]) == 0


def _sample(model, decoding, greedy):
    group = 1 if greedy else 4
    options = SamplingOptions(max_new_tokens=10, group_size=group, temperature=3.0, greedy=greedy)
    return generate(
        model, TOK, PROMPTS, options, generator=torch.Generator().manual_seed(0), decoding=decoding
    )


@pytest.mark.parametrize("decoding", [Decoding.CASCADE, Decoding.COPIED], ids=lambda d: d.value)
@pytest.mark.parametrize("greedy", [False, True], ids=["sampled", "greedy"])
@pytest.mark.parametrize("build", [lambda: build_tiny_hf_model(TOK.vocab_size), lambda: tiny_qwen2(TOK.vocab_size)],
                         ids=["llama", "qwen2"])  # fmt: skip
def test_the_shared_head_samples_what_whole_prompts_sample(build, greedy, decoding, monkeypatch):
    model = build().double().eval()
    calls, original = [], generate_module.forward_with_cache

    def counted(m, ids, *args, **kwargs):
        calls.append(tuple(ids.shape))
        return original(m, ids, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(generate_module, "forward_with_cache", counted)
        shared = _sample(model, decoding, greedy)
    own = len("12+34?")
    head = len(encode_prompt(TOK, PROMPTS[0])) - own
    assert calls[:2] == [(1, head), (len(PROMPTS), own)]  # the head once, then each prompt's own columns
    with monkeypatch.context() as patch:
        patch.setattr(generate_module, "shared_columns", lambda ids, mask: 0)
        whole = _sample(model, decoding, greedy)
    assert torch.equal(shared.input_ids, whole.input_ids)
    torch.testing.assert_close(shared.old_logps, whole.old_logps, atol=1e-12, rtol=1e-12)
