"""generate(): batch layout, EOS handling, reproducibility, and old_logps matching a full forward pass."""

import pytest
import torch
from sampling_helpers import EosAtPosition
from torch import nn

from twinkle_exp.models import CharTokenizer, TinyCausalLM, build_tiny_hf_model, encode_prompt
from twinkle_exp.sampling.generate import SamplingOptions, draw, filter_logits, generate

TOK = CharTokenizer()
PROMPTS = ["1+2=", "hello world", "", "abc"]


def tiny_model(seed: int = 0) -> TinyCausalLM:
    torch.manual_seed(seed)
    return TinyCausalLM(TOK.vocab_size, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, dropout=0.0).eval()


def full_forward_logps(model, batch, temperature: float) -> torch.Tensor:  # [N, P + C]
    logits = model(
        batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids
    ).logits
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)[:, :-1]
    per_token = logp.gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    return torch.cat([torch.zeros_like(per_token[:, :1]), per_token], dim=1)


def test_batch_layout_is_consistent():
    g = torch.Generator().manual_seed(0)
    b = generate(tiny_model(), TOK, PROMPTS, SamplingOptions(max_new_tokens=6, group_size=3), generator=g)
    n = len(PROMPTS) * 3
    encoded = [encode_prompt(TOK, p) for p in PROMPTS]
    p = max(map(len, encoded))
    assert b.input_ids.shape == b.attention_mask.shape == b.labels.shape == b.old_logps.shape
    assert b.input_ids.shape[0] == n and b.input_ids.shape[1] == p + 6
    assert b.old_logps.dtype == torch.float32
    assert b.prompt_index.tolist() == [i for i in range(len(PROMPTS)) for _ in range(3)]
    on = b.labels != -100
    assert (b.labels[:, :p] == -100).all()
    assert (b.attention_mask[:, p:].bool() == on[:, p:]).all()
    assert (b.input_ids[on] == b.labels[on]).all()
    assert (b.old_logps[~on] == 0).all() and (b.old_logps[on] < 0).all()
    assert b.completion_lengths.tolist() == on.sum(-1).tolist()
    expected_pos = (b.attention_mask.cumsum(-1) - 1).clamp(min=0) * b.attention_mask
    assert torch.equal(b.position_ids, expected_pos)
    for row in range(n):
        prompt = encoded[row // 3]
        assert b.input_ids[row, p - len(prompt) : p].tolist() == prompt
        assert b.attention_mask[row, : p - len(prompt)].sum() == 0
        assert b.completions[row] == TOK.decode(b.completion_ids[row], skip_special_tokens=False)
        n_eos = int(not b.truncated[row])
        assert len(b.completion_ids[row]) == b.completion_lengths[row] - n_eos


def make_model(kind: str) -> nn.Module:
    return tiny_model() if kind == "tiny" else build_tiny_hf_model(TOK.vocab_size).eval()


@pytest.mark.parametrize("kind", ["tiny", "hf"])
def test_eos_stops_and_pads_after(kind):
    # Prompt lengths with BOS: 5, 12, 1, 4 -> EOS at position 8 leaves 3, 1 (EOS at once), 7, 4 tokens + EOS.
    model = EosAtPosition(make_model(kind), stop=8)
    b = generate(model, TOK, PROMPTS, SamplingOptions(max_new_tokens=10))
    assert b.truncated.tolist() == [False] * 4
    assert b.completion_lengths.tolist() == [4, 1, 8, 5]
    assert b.input_ids.shape[1] == 12 + 8  # stopped early: no column after the last EOS
    assert [len(c) for c in b.completion_ids] == [3, 0, 7, 4]
    assert b.completions[1] == ""
    p = 12
    for row, length in enumerate(b.completion_lengths.tolist()):
        assert b.labels[row, p + length - 1] == TOK.eos_token_id
        assert TOK.eos_token_id not in b.completion_ids[row]
        assert (b.input_ids[row, p + length :] == TOK.pad_token_id).all()
        assert (b.attention_mask[row, p + length :] == 0).all()
        assert (b.labels[row, p + length :] == -100).all()
    on = b.labels != -100
    torch.testing.assert_close(b.old_logps[on], full_forward_logps(model, b, 1.0)[on], atol=1e-4, rtol=0)


def test_truncated_when_no_eos():
    b = generate(EosAtPosition(tiny_model(), stop=8), TOK, PROMPTS, SamplingOptions(max_new_tokens=3))
    # Row 0 would emit EOS as its 4th token: 3 tokens without EOS still count as truncated.
    assert b.truncated.tolist() == [True, False, True, True]
    assert b.completion_lengths.tolist() == [3, 1, 3, 3]
    assert b.input_ids.shape[1] == 12 + 3
    assert [len(c) for c in b.completion_ids] == [3, 0, 3, 3]
    assert b.labels[1, 12] == TOK.eos_token_id and not (b.labels[[0, 2, 3]] == TOK.eos_token_id).any()


def test_seeded_sampling_is_reproducible():
    model = tiny_model()
    kw = dict(options=SamplingOptions(group_size=2, max_new_tokens=8, temperature=0.9, top_p=0.95))
    a = generate(model, TOK, PROMPTS, generator=torch.Generator().manual_seed(7), **kw)
    b = generate(model, TOK, PROMPTS, generator=torch.Generator().manual_seed(7), **kw)
    c = generate(model, TOK, PROMPTS, generator=torch.Generator().manual_seed(8), **kw)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.old_logps, b.old_logps)
    assert not torch.equal(a.input_ids, c.input_ids)


def test_greedy_equals_argmax():
    model = tiny_model()
    b = generate(
        model, TOK, PROMPTS, SamplingOptions(max_new_tokens=6, group_size=2, temperature=0.3, greedy=True)
    )
    logits = model(b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids).logits
    on = (b.labels != -100)[:, 1:]
    assert torch.equal(logits[:, :-1].argmax(-1)[on], b.labels[:, 1:][on])
    assert torch.equal(b.input_ids[0::2], b.input_ids[1::2])  # greedy: a group's samples are identical
    # greedy records temperature-1 log-probs whatever temperature was passed
    on = b.labels != -100
    torch.testing.assert_close(b.old_logps[on], full_forward_logps(model, b, 1.0)[on], atol=1e-4, rtol=0)


def test_top_k_one_is_greedy():
    model = tiny_model()
    greedy = generate(model, TOK, PROMPTS, SamplingOptions(max_new_tokens=5, greedy=True))
    sampled = generate(
        model,
        TOK,
        PROMPTS,
        SamplingOptions(max_new_tokens=5, top_k=1),
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.equal(greedy.input_ids, sampled.input_ids)


def test_filter_logits():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, 2, 1.0)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, 0, 0.7)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, 0, 0.8)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, 0, 0.81)).tolist() == [[False, False, False, True]]
    assert torch.isinf(filter_logits(logits, 0, 0.1)).tolist() == [[False, True, True, True]]
    assert not torch.isinf(filter_logits(logits, 0, 1.0)).any()


def test_draw_follows_the_softmax():
    """200k Gumbel-max draws from one row land on each token as often as its probability says (chi-square)."""
    from scipy.stats import chisquare

    probs = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.029, 0.001])
    logits = (probs.log() - 3.0).expand(200_000, -1)  # a shift changes nothing: softmax is what counts
    counts = torch.bincount(draw(logits, torch.Generator().manual_seed(0)), minlength=len(probs))
    assert chisquare(counts.numpy(), (probs * 200_000).numpy()).pvalue > 1e-3
    # the same test against a slightly different distribution fails, so it can tell them apart
    off = torch.tensor([0.49, 0.26, 0.15, 0.07, 0.029, 0.001])
    assert chisquare(counts.numpy(), (off * 200_000).numpy()).pvalue < 1e-6


def test_draw_never_picks_a_removed_token():
    logits = torch.tensor([[0.0, float("-inf"), 5.0, float("-inf")]]).expand(50_000, -1)
    assert set(draw(logits, torch.Generator().manual_seed(1)).tolist()) == {0, 2}


@pytest.mark.parametrize("kind", ["tiny", "hf"])
def test_old_logps_match_full_forward(kind):
    model = EosAtPosition(make_model(kind), stop=9)
    g = torch.Generator().manual_seed(1)
    b = generate(
        model,
        TOK,
        PROMPTS,
        SamplingOptions(max_new_tokens=8, group_size=3, temperature=0.7, top_k=20, top_p=0.9),
        generator=g,
    )
    assert not b.truncated.all() and b.truncated.any()  # the check covers stopped and running rows
    on = b.labels != -100
    ref = full_forward_logps(model, b, 0.7)
    torch.testing.assert_close(b.old_logps[on], ref[on], atol=1e-4, rtol=0)
    # The tempered distribution is the one recorded: temperature 1 gives different values.
    assert not torch.allclose(b.old_logps[on], full_forward_logps(model, b, 1.0)[on], atol=1e-3)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(group_size=0), "group_size"),
        (dict(temperature=0.0), "temperature"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(max_new_tokens=0), "max_new_tokens"),
    ],
)
def test_argument_validation(kwargs, name):
    args = dict(max_new_tokens=4) | kwargs
    with pytest.raises(ValueError, match=name):
        generate(tiny_model(), TOK, ["ab"], SamplingOptions(**args))
