"""Decoding steps run on the rows still decoding only, and sample exactly what every row decoding to the
end sampled (`generate(compact=False)`)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hf_helpers import tiny_qwen2

from twinkle_exp.models import CharTokenizer, TinyCausalLM, build_tiny_hf_model
from twinkle_exp.sampling import cascade
from twinkle_exp.sampling import generate as generate_module
from twinkle_exp.sampling.generate import Decoding, SamplingOptions, generate

pytest.importorskip("transformers")

TOK = CharTokenizer()
# Ragged prompts (left padding), one of them in two groups; with BOS 7, 5, 7, 4 and 12 tokens.
PROMPTS = ["12+34=", "7+8=", "12+34=", "abc", "hello world"]
STOP = 16  # every row ends at this absolute position: after 9 to 12 tokens, or 4 for "hello world"
SAMPLED = SamplingOptions(max_new_tokens=12, group_size=4, temperature=1.5, top_p=0.95)
GREEDY = SamplingOptions(max_new_tokens=12, greedy=True)


def ending(model: torch.nn.Module, eos_bias: float) -> torch.nn.Module:
    """`model` with `eos_bias` added to its EOS logit, and EOS forced at position `STOP`: sampled rows end at
    random steps (a random tiny model would rarely draw EOS), greedy ones by their prompt's length."""

    def hook(module, args, kwargs, out):
        positions = kwargs["position_ids"][:, -out.logits.shape[1] :]  # [B, T] those with logits
        out.logits[..., TOK.eos_token_id] += torch.where(positions >= STOP - 1, 100.0, eos_bias)

    model.register_forward_hook(hook, with_kwargs=True)
    return model


def qwen2():  # grouped-query attention, cascade attention supported
    return tiny_qwen2(TOK.vocab_size)


def llama():
    return build_tiny_hf_model(TOK.vocab_size)


def tiny():  # the built-in model: a tuple KV cache
    torch.manual_seed(0)
    return TinyCausalLM(TOK.vocab_size, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, dropout=0.0)


CASES = [
    (qwen2, Decoding.CASCADE),
    (llama, Decoding.CASCADE),
    (qwen2, Decoding.COPIED),
    (llama, Decoding.PER_ROW),
    (tiny, Decoding.COPIED),
]


def sample(model, options: SamplingOptions, decoding: Decoding, compact: bool):
    generator = torch.Generator().manual_seed(0)
    return generate(model, TOK, PROMPTS, options, generator=generator, decoding=decoding, compact=compact)


def assert_same_batch(a, b) -> None:
    """Every field equal; the log-probs (float arithmetic on batches of other sizes) to 1e-12."""
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if field.name in ("old_logps", "filtered_mass") and x is not None:
            torch.testing.assert_close(x, y, atol=1e-12, rtol=1e-12, msg=field.name)
        elif isinstance(x, torch.Tensor):
            assert torch.equal(x, y), field.name
        else:
            assert x == y, field.name


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("options", [SAMPLED, GREEDY], ids=["sampled", "greedy"])
@pytest.mark.parametrize("build, decoding", CASES, ids=lambda c: getattr(c, "__name__", None) or c.value)
def test_dropping_ended_rows_samples_the_same_tokens_and_log_probs(build, decoding, options):
    model = ending(build().double().eval(), eos_bias=0.0 if options.greedy else 3.0)
    assert decoding is not Decoding.CASCADE or cascade.supported(model)
    compact = sample(model, options, decoding, compact=True)
    plain = sample(model, options, decoding, compact=False)
    # Precondition: rows ended at several different steps, some before the budget
    lengths = compact.completion_lengths
    assert len(set(lengths.tolist())) >= 3 and (lengths < options.max_new_tokens).any()
    assert_same_batch(compact, plain)


def batch_sizes(lengths: torch.Tensor, drop_at: float) -> list[int]:
    """The rows each decoding step should run on, from the completion lengths `[N]`: after step t a row of
    length L is still decoding while t + 1 < L; ended rows leave once they are `drop_at` of the batch."""
    sizes, held = [], len(lengths)
    for t in range(int(lengths.max()) - 1):  # the first token comes from the prefill
        decoding = int((lengths > t + 1).sum())
        if held - decoding >= max(1, drop_at * held):
            held = decoding
        sizes.append(held)
    return sizes


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("drop_at", [0.0, generate_module.DROP_AT], ids=["every-end", "default"])
@pytest.mark.parametrize("decoding", [Decoding.CASCADE, Decoding.COPIED])
def test_each_step_runs_the_model_on_the_rows_still_decoding(decoding, drop_at, monkeypatch):
    monkeypatch.setattr(generate_module, "DROP_AT", drop_at)
    model = ending(qwen2().double().eval(), eos_bias=3.0)
    rows = []
    model.register_forward_pre_hook(lambda module, args: rows.append(args[0].shape[0]))
    lengths = sample(model, SAMPLED, decoding, compact=True).completion_lengths
    expected = batch_sizes(lengths, drop_at)
    assert rows[1:] == expected  # rows[0]: the prefill
    # Precondition: rows were dropped, and (by default) some only once enough of them had ended
    assert expected[-1] < len(lengths)
    assert drop_at == 0 or expected != batch_sizes(lengths, 0.0)
    rows.clear()
    sample(model, SAMPLED, decoding, compact=False)
    assert rows[1:] == [len(lengths)] * len(expected)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(
    "build, drops", [(qwen2, True), (llama, True), (tiny, False)], ids=["qwen2", "llama", "tiny"]
)
def test_by_default_transformers_models_drop_ended_rows_and_the_built_in_one_keeps_them(build, drops):
    model = ending(build().double().eval(), eos_bias=3.0)
    assert generate_module.compacts(model) is drops
    rows = []
    model.register_forward_pre_hook(lambda module, args: rows.append(args[0].shape[0]))
    generator = torch.Generator().manual_seed(0)
    lengths = generate(
        model, TOK, PROMPTS, SAMPLED, generator=generator, decoding=Decoding.COPIED
    ).completion_lengths
    # Precondition: rows ended before the last step, so dropping them was possible
    assert int(lengths.min()) < int(lengths.max())
    assert (min(rows[1:]) < len(lengths)) is drops
