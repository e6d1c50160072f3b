"""Each change to the real model's step beside what it replaced, interleaved in one process.

A whole rollout (`real_step.py`) moves by 5-10% between runs on a shared 2-core machine, more than a change
that touches one part of it saves; here the old and the new path alternate call by call in one process,
on the preset's shapes, so that the machine's drift falls on both alike. Cases:

- `lora`: one LoRA MLP block (`[rows, hidden] -> intermediate -> hidden`, r 16, alpha 32), forward and
  backward, peft's `lora.Linear` against `policy.lora.fused` (`models/lora_fused.py`);
- `gqa`: the model's no-gradient pass (the reference's) and a forward and backward (the update's) with
  grouped-query keys and values copied to every head (`TRANSFORMERS_SDPA_FORCE_GQA=0`) and handed to SDPA
  as they are (`=1`, `models/hf.grouped_query_sdpa`);
- `rollout`, `greedy`: `generate` with EOS on, every row decoding to the last step (`compact=False`)
  against the rows that have ended dropped (`compact=True`), on the preset's rollout (8 two-digit additions
  in the chat template x 8 samples at temperature 0.7) and its greedy validation (128 held-out prompts),
  24 new tokens; `--decoding` picks the prompt's keys and values (default: as a CPU run does). Both
  variants draw with the same seeds, so they sample the same tokens; the line after them says how many of
  the decoding steps' rows had ended. The model is SmolLM2 as released, which is what a fresh LoRA
  policy's merged copy samples from; a trained policy's replies are shorter.

`--model smollm2` (the default) or `tiny` (tests) for `gqa`, `rollout` and `greedy`.

    OMP_NUM_THREADS=2 python -m benchmarks.step_changes --threads 2 --cases lora,gqa
    OMP_NUM_THREADS=1 python -m benchmarks.step_changes --threads 1 --cases rollout --sampler-iters 5
    # a greedy call takes ~25 s on one core (two thirds of it the prefill): one pair a run
    OMP_NUM_THREADS=1 python -m benchmarks.step_changes --threads 1 --cases greedy \
        --sampler-iters 1 --sampler-warmup 0

Prints the median, first and third quartile of each variant's seconds per call, and the load average
before and after.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import random
import statistics
import time
from collections.abc import Callable

import torch

from benchmarks.harness import load_average

CASES = ("lora", "gqa", "rollout", "greedy")
# conf/experiment/smollm2_addition.yaml's rollout and validation
PROMPTS_PER_STEP, GROUP_SIZE, TEMPERATURE, MAX_NEW_TOKENS = 8, 8, 0.7, 24
PROMPT_TEMPLATE = "What is {a} + {b}? Reply with just the number."


def interleaved(variants: dict[str, Callable[[], None]], iters: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per call of each variant, called in turn `iters` times after `warmup` calls each."""
    for fn in variants.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(iters):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def lora_variants(rows: int, hidden: int, intermediate: int) -> dict[str, Callable[[], None]]:
    import peft
    from torch import nn

    from twinkle_exp.models.lora_fused import fuse_lora_layers

    def block(fused: bool) -> nn.Module:
        torch.manual_seed(0)
        mlp = nn.Sequential(
            nn.Linear(hidden, intermediate, bias=False), nn.Linear(intermediate, hidden, bias=False)
        )
        model = peft.get_peft_model(mlp, peft.LoraConfig(r=16, lora_alpha=32, target_modules=["0", "1"]))
        if fused and fuse_lora_layers(model) != 2:
            raise RuntimeError("the fused layers did not replace peft's")
        return model

    x = torch.randn(rows, hidden, requires_grad=True)  # [rows, hidden]

    def step(model: nn.Module) -> Callable[[], None]:
        return lambda: model(x).sum().backward()

    return {"peft lora.Linear": step(block(False)), "fused (policy.lora.fused)": step(block(True))}


def _tiny_qwen2(vocab_size: int) -> torch.nn.Module:
    from twinkle_exp.models.hf import build_tiny_qwen2

    return build_tiny_qwen2(
        vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=128,
    )


def gqa_variants(model_name: str, rows: int, columns: int) -> dict[str, Callable[[], None]]:
    from twinkle_exp.models.hf import GqaSwitch, load_hf_model

    if model_name == "tiny":
        model = _tiny_qwen2(256)
    else:
        from twinkle_exp.models.gguf import resolve_source

        model = load_hf_model(resolve_source(model_name), attn_implementation="sdpa")
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, columns), generator=g)  # [B, T]
    mask = torch.ones_like(ids)  # [B, T], a third of the rows left-padded as a rollout's are
    mask[::3, : columns // 8] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, T]

    def call(flag: str, grad: bool) -> Callable[[], None]:
        def run() -> None:
            with GqaSwitch(flag), torch.set_grad_enabled(grad):
                logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits  # [B, T, V]
                if grad:
                    logits[:, -columns // 3 :].sum().backward()

        return run

    return {
        "no-grad pass, copies": call("0", False),
        "no-grad pass, grouped": call("1", False),
        "forward+backward, copies": call("0", True),
        "forward+backward, grouped": call("1", True),
    }


@functools.cache
def _addition_sampler(model_name: str) -> tuple:
    """The model, its tokenizer (the chat template's for SmolLM2) and the preset's addition task."""
    from twinkle_exp.models import CharTokenizer
    from twinkle_exp.models.hf import load_hf_causal_lm
    from twinkle_exp.tasks.addition import AdditionTask

    if model_name == "tiny":
        tokenizer = CharTokenizer()
        return _tiny_qwen2(tokenizer.vocab_size).eval(), tokenizer, AdditionTask(min_digits=2, max_digits=2)
    from twinkle_exp.models.chat import with_chat_template
    from twinkle_exp.models.gguf import resolve_source

    model, tokenizer = load_hf_causal_lm(resolve_source(model_name), attn_implementation="sdpa")
    task = AdditionTask(min_digits=2, max_digits=2, prompt_template=PROMPT_TEMPLATE, chat_template=True)
    return model.eval(), with_chat_template(tokenizer), task


def sampler_variants(
    model_name: str, greedy: bool, decoding: str
) -> tuple[dict[str, Callable[[], None]], list]:
    """`generate` on every row to the end and on the rows still decoding, and the list that collects the
    batches the second samples (what `ended_share` reads)."""
    from twinkle_exp.sampling.generate import Decoding, SamplingOptions, generate

    model, tokenizer, task = _addition_sampler(model_name)
    if greedy:
        prompts = [e.prompt for e in task.validation_set()]
        options = SamplingOptions(MAX_NEW_TOKENS, greedy=True)
    else:
        prompts = [e.prompt for e in task.sample(PROMPTS_PER_STEP, random.Random(0))]
        options = SamplingOptions(MAX_NEW_TOKENS, group_size=GROUP_SIZE, temperature=TEMPERATURE)
    how = Decoding.auto(model, torch.device("cpu")) if decoding == "auto" else Decoding(decoding)
    batches: list = []

    def call(compact: bool) -> Callable[[], None]:
        seeds = itertools.count()  # the k-th call of each variant draws with seed k: the same tokens

        def run() -> None:
            generator = torch.Generator().manual_seed(next(seeds))
            batch = generate(
                model, tokenizer, prompts, options, generator=generator, decoding=how, compact=compact
            )
            if compact:
                batches.append(batch)

        return run

    return {f"{how.value}, every row": call(False), f"{how.value}, ended dropped": call(True)}, batches


def ended_share(batches: list) -> str:
    """How many of the decoding steps' rows had ended, over `batches` (RolloutBatch): each ran
    (completion columns - 1) steps on all its rows, of which a row of length L needed L - 1."""
    lengths = torch.cat([b.completion_lengths for b in batches]).float()  # [sum N]
    steps = [int(b.completion_lengths.max()) - 1 for b in batches]
    row_steps = sum(len(b.completion_lengths) * s for b, s in zip(batches, steps, strict=True))
    return (
        f"  {1 - float((lengths - 1).sum()) / row_steps:.0%} of the decoding steps' rows had ended "
        f"(completions of {lengths.mean():.1f} tokens, {statistics.mean(steps):.1f} steps a call, on average)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="lora,gqa", help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iters", type=int, default=40, help="timed calls of each variant (gqa: a quarter)")
    parser.add_argument("--model", default="smollm2", help="gqa, rollout, greedy: smollm2 or tiny")
    parser.add_argument("--rows", type=int, default=736, help="lora: rows (an update minibatch's tokens)")
    parser.add_argument("--sampler-iters", type=int, default=4, help="rollout, greedy: timed calls of each")
    parser.add_argument(
        "--sampler-warmup", type=int, default=1, help="rollout, greedy: untimed calls of each"
    )
    parser.add_argument(
        "--decoding", default="auto", help="rollout, greedy: auto, cascade, copied or per_row"
    )
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown or not cases:
        raise SystemExit(f"--cases: unknown {unknown} (choose from {', '.join(CASES)})")
    torch.set_num_threads(args.threads)
    print(f"{args.threads} thread(s); before: {load_average()}")
    for case in cases:
        batches = None
        if case == "lora":
            variants, iters, warmup = lora_variants(args.rows, 576, 1536), args.iters, 2
            shape = f"[{args.rows}, 576] -> 1536 -> 576, r 16"
        elif case == "gqa":
            variants, iters, warmup = gqa_variants(args.model, 16, 70), max(2, args.iters // 4), 2
            shape = f"{args.model}, [16, 70]"
        else:
            variants, batches = sampler_variants(args.model, case == "greedy", args.decoding)
            iters, warmup = args.sampler_iters, args.sampler_warmup
            shape = f"{args.model}, {MAX_NEW_TOKENS} new tokens"
        times = interleaved(variants, iters, warmup=warmup)
        print(f"{case} ({shape}), {iters} calls each, interleaved:")
        for name, values in times.items():
            q1, _, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
            print(
                f"  {name:28s} median {statistics.median(values) * 1e3:9.2f} ms  (quartiles {q1 * 1e3:.2f}-{q3 * 1e3:.2f})"
            )
        if batches:
            print(ended_share(batches))
    print(f"after: {load_average()}")


if __name__ == "__main__":
    main()
