"""The real-model step benchmark's FLOP count, on hand-computed examples. (A one-rollout run of the
benchmark takes over a minute on the 2-core CPU, so it has no smoke test here.)"""

from __future__ import annotations

import torch

from benchmarks.flops import (
    MatmulParams,
    TokenCounts,
    matmul_params,
    matmul_rate,
    profiled_products,
    update_flops,
)

PARAMS = MatmulParams(trunk=10, head=3, adapters=2)
TOKENS = TokenCounts(trunk=5, head=4, trunk_no_grad=7, head_no_grad=1)


def test_lora_counts_4x_for_frozen_weights_6x_for_adapters_2x_without_gradient():
    # frozen base: 4 x (10 x 5 + 3 x 4) = 248; adapters 6 x 2 x 5 = 60; no grad 2 x ((10 + 2) x 7 + 3 x 1) = 174
    assert update_flops(PARAMS, TOKENS, full=False) == 248 + 60 + 174


def test_full_fine_tuning_counts_6x_for_every_weight():
    params = MatmulParams(trunk=10, head=3)
    # 6 x (10 x 5 + 3 x 4) = 372; no grad 2 x (10 x 7 + 3 x 1) = 146
    assert update_flops(params, TOKENS, full=True) == 372 + 146


def test_the_trunk_and_the_head_count_their_own_tokens():
    # Prompt sharing: the trunk runs fewer positions than the head scores here; swapping them changes the count.
    params = MatmulParams(trunk=100, head=1)
    assert update_flops(params, TokenCounts(trunk=1, head=9), True) == 6 * (100 + 9)
    assert update_flops(params, TokenCounts(trunk=9, head=1), True) == 6 * (900 + 1)


def test_matmul_params_of_a_small_llama_with_lora_adapters():
    from twinkle_exp.models.backbone import output_head, unwrap_peft
    from twinkle_exp.models.hf import build_tiny_hf_model
    from twinkle_exp.models.lora import LoraSettings, apply_lora

    model = build_tiny_hf_model(50, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4)
    # Per layer: q, k, v, o 4 x 32 x 32 = 4096; gate, up, down 3 x 32 x 64 = 6144; two layers.
    plain = matmul_params(model.get_decoder(), output_head(model))
    assert plain == MatmulParams(trunk=2 * (4096 + 6144), head=50 * 32, adapters=0)
    lora = apply_lora(model, LoraSettings(r=2, alpha=4.0))
    # r x (in + out) per adapted layer: 4 x 2 x 64 (attention) + 2 x 2 x 96 (gate, up) + 2 x 96 (down) = 1088
    counted = matmul_params(unwrap_peft(lora).get_decoder(), output_head(lora))
    assert counted == MatmulParams(trunk=2 * (4096 + 6144), head=50 * 32, adapters=2 * 1088)


def test_matmul_rate_is_a_positive_flop_rate(one_thread):
    assert matmul_rate(8, 8, 8, repeats=2, min_seconds=0.001) > 0


def test_profiled_products_are_classed_by_shape_and_counted_from_it(one_thread):
    vocab = 300
    x, w, a, head = torch.randn(70, 96), torch.randn(96, 128), torch.randn(96, 8), torch.randn(96, vocab)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        out = x @ w  # weights: [70, 96] @ [96, 128]
        # low-rank twice: [70, 96] @ [96, 8], then in place [70, 8] @ [8, 128]
        out.addmm_(x @ a, torch.randn(8, 128))
        (x @ head).sum()  # head: [70, 96] @ [96, vocab]
        (out * 2.0 + 1.0).sum()  # elementwise, FLOPs to the profiler but no product
    classes = profiled_products(prof.key_averages(group_by_input_shape=True), vocab, rank=8)
    assert set(classes) == {"weights", "low-rank", "head"}
    assert (classes["weights"].flops, classes["weights"].calls) == (2 * 70 * 96 * 128, 1)
    assert (classes["low-rank"].flops, classes["low-rank"].calls) == (2 * 70 * 96 * 8 + 2 * 70 * 8 * 128, 2)
    assert (classes["head"].flops, classes["head"].calls) == (2 * 70 * 96 * vocab, 1)
    assert all(c.seconds > 0 for c in classes.values())
