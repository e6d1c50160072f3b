"""The sampler's draw is exact at a real vocabulary size, and survives hostile settings and logits."""

import math

import pytest
import torch
from scipy.stats import chisquare
from test_rollout import PROMPTS, TOK, full_forward_logps, tiny_model

from twinkle_exp.sampling.generate import SamplingOptions, draw, draw_from_probs, filter_logits, generate

QWEN_VOCAB = 151_936


def heavy_head(tail_p: float, vocab: int = QWEN_VOCAB) -> tuple[torch.Tensor, float]:
    """`[V]` float32 probabilities: token 0 takes what `vocab - 1` tail tokens of `tail_p` each leave."""
    tail = (vocab - 1) * tail_p
    probs = torch.full((vocab,), tail_p)
    probs[0] = 1.0 - tail
    return probs, tail


@pytest.mark.slow
def test_light_tail_of_a_qwen_vocabulary_is_drawn_at_its_mass():
    """151,935 tail tokens of 2e-8 each hold m = 0.304% of the mass; the float32 Gumbel draw gave them 0.05%.

    Power: over n = 32,768 draws the tail count has sd sqrt(n m (1 - m)) = 10.0 around n m = 99.6; the bound
    is 5 sd (a false failure once in 1.7 million runs). The old draw's count, ~16 (sd 4), sits 8.3 sd below
    and would have to rise 13 of its own sd to pass.
    """
    probs, mass = heavy_head(2e-8)
    generator = torch.Generator().manual_seed(0)
    n, rows = 32_768, 512
    count = sum(
        int((draw_from_probs(probs.expand(rows, -1), generator) != 0).sum()) for _ in range(n // rows)
    )
    sd = math.sqrt(n * mass * (1 - mass))
    assert abs(count - n * mass) < 5 * sd, f"tail drawn {count} times, expected {n * mass:.1f} +- {sd:.1f}"


def test_two_stage_search_follows_the_softmax_across_block_edges():
    """Blocks of 7 over 23 tokens (a short last block, an empty block): chi-square against the softmax."""
    probs = torch.rand(23, generator=torch.Generator().manual_seed(3)) + 0.05
    probs[7:14] = 0.0  # a whole block without mass
    probs[22] = 0.0  # and the very last token
    n = 100_000
    tokens = draw_from_probs(probs.expand(n, -1), torch.Generator().manual_seed(0), block=7)
    counts = torch.bincount(tokens, minlength=23)
    assert counts[probs == 0].sum() == 0
    expected = probs.double() / probs.double().sum() * n
    kept = probs > 0
    assert chisquare(counts[kept].numpy(), expected[kept].numpy()).pvalue > 1e-3


def test_unnormalised_probabilities_give_the_same_draws():
    probs = torch.softmax(torch.randn(4, 3000, generator=torch.Generator().manual_seed(1)), -1)
    a = draw_from_probs(probs, torch.Generator().manual_seed(5))
    b = draw_from_probs(probs * 0.37, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)


def test_draws_replay_from_the_generator_state():
    logits = torch.randn(6, 500, generator=torch.Generator().manual_seed(2))
    g = torch.Generator().manual_seed(11)
    draw(logits, g)
    state = g.get_state()
    first = [draw(logits, g) for _ in range(3)]
    g.set_state(state)
    assert all(torch.equal(x, draw(logits, g)) for x in first)


def test_bfloat16_logits_follow_their_softmax():
    """The float32 Gumbel draw made its uniforms in the logits' dtype: in bf16 (8 bits) it was far off."""
    probs = torch.tensor([0.6, 0.3, 0.09, 0.01])
    logits = probs.log().to(torch.bfloat16)
    n = 200_000
    counts = torch.bincount(draw(logits.expand(n, -1), torch.Generator().manual_seed(0)), minlength=4)
    exact = torch.softmax(logits.double(), -1) * n
    assert chisquare(counts.numpy(), exact.numpy()).pvalue > 1e-3


@pytest.mark.parametrize("vocab", [50, 3000])  # one block; three, the last one short
@pytest.mark.parametrize("bad", [float("-inf"), float("nan")])
def test_rows_without_finite_mass_still_give_a_token_in_range(bad, vocab):
    logits = torch.randn(64, vocab)
    logits[1::2] = bad
    for seed in range(20):
        tokens = draw(logits, torch.Generator().manual_seed(seed))
        assert tokens.shape == (64,) and ((tokens >= 0) & (tokens < vocab)).all()


def test_tiny_temperature_is_greedy_with_finite_log_probs():
    """logits / 1e-40 overflowed float32 to inf, and the softmax to NaN everywhere."""
    model = tiny_model()
    greedy = generate(model, TOK, PROMPTS, SamplingOptions(max_new_tokens=5, greedy=True))
    cold = generate(
        model, TOK, PROMPTS, SamplingOptions(max_new_tokens=5, temperature=1e-40), generator=torch.Generator()
    )
    assert torch.equal(greedy.input_ids, cold.input_ids)
    assert torch.isfinite(cold.old_logps).all()


@pytest.mark.parametrize("temperature", [float("inf"), float("nan")])
def test_non_finite_temperature_is_refused(temperature):
    with pytest.raises(ValueError, match="temperature"):
        generate(tiny_model(), TOK, ["ab"], SamplingOptions(max_new_tokens=2, temperature=temperature))


def test_tiny_top_p_is_greedy():
    model = tiny_model()
    greedy = generate(model, TOK, PROMPTS, SamplingOptions(max_new_tokens=5, greedy=True))
    sampled = generate(
        model, TOK, PROMPTS, SamplingOptions(max_new_tokens=5, top_p=1e-12), generator=torch.Generator()
    )
    assert torch.equal(greedy.input_ids, sampled.input_ids)


def test_top_k_beyond_the_vocabulary_filters_nothing():
    model = tiny_model()
    kw = dict(group_size=2, max_new_tokens=6, temperature=0.8)
    plain = generate(model, TOK, PROMPTS, SamplingOptions(**kw), generator=torch.Generator().manual_seed(4))
    wide = generate(
        model, TOK, PROMPTS, SamplingOptions(**kw, top_k=10**9), generator=torch.Generator().manual_seed(4)
    )
    assert torch.equal(plain.input_ids, wide.input_ids) and wide.filtered_mass is None


def test_filtered_mass_is_the_removed_softmax_mass():
    """Per row, the sum over completion tokens of the tempered mass top-k / top-p removed, as a full
    forward pass over the sampled batch computes it."""
    model = tiny_model()
    t, k, p = 0.7, 5, 0.9
    b = generate(model, TOK, PROMPTS, SamplingOptions(max_new_tokens=6, group_size=3, temperature=t, top_k=k, top_p=p), generator=torch.Generator().manual_seed(0))  # fmt: skip
    logits = model(b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids).logits
    scaled = logits.float()[:, :-1] / t  # [N, T - 1, V], position i predicts token i + 1
    flat = scaled.reshape(-1, scaled.shape[-1])
    removed = torch.isneginf(filter_logits(flat, k, p)).reshape(scaled.shape)
    per_token = (scaled.softmax(-1) * removed).sum(-1)
    on = (b.labels != -100)[:, 1:]
    expected = (per_token * on).sum(-1)
    torch.testing.assert_close(b.filtered_mass, expected, atol=1e-4, rtol=0)
    assert (b.filtered_mass > 0).all()
    # The tokens scored are still the full softmax's: the filter changes what is drawn, not old_logps.
    on = b.labels != -100
    torch.testing.assert_close(b.old_logps[on], full_forward_logps(model, b, t)[on], atol=1e-4, rtol=0)


def test_no_filter_no_filtered_mass():
    b = generate(tiny_model(), TOK, PROMPTS, SamplingOptions(max_new_tokens=3), generator=torch.Generator())
    assert b.filtered_mass is None
