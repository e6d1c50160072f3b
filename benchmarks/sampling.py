"""Sampling throughput on a tiny random Qwen2: our sampler with and without the shared prefill, and HF generate.

    python -m benchmarks.sampling               # 16 prompts x 8 samples, 32 new tokens
    python -m benchmarks.sampling --vocab-size 151936 --methods cascade   # Qwen's vocabulary

The model is built from a config (hidden 128, 4 layers, the character vocabulary), never downloaded.
Four methods, same model, same prompts, same settings (temperature 1, no top-k, no top-p):
- `cascade`: `rollout.generate`, each distinct prompt prefilled once and its keys and values read once per
  group at every decoding step (cascade attention, `cascade.py`);
- `shared`: `generate(decoding=Decoding.COPIED)`, the prompt's KV cache copied to its samples;
- `per_row`: `generate(decoding=Decoding.PER_ROW)`, every sample prefilled (the sampler before both);
- `hf_generate`: `model.generate(do_sample=True, num_return_sequences=G)`.
EOS is switched off for all three so that every row samples exactly `--new-tokens` tokens, and tokens/s =
rows x new tokens / seconds (so rows that end early, which `generate` drops from its steps, never occur
here: `step_changes.py --cases rollout,greedy` times that). Our sampler also computes each token's log-prob (the loss's old_logps);
`generate` does not. Each (method, repeat) runs in its own subprocess (see `harness.py`), which times
`--iters` calls after one warm-up call and reports their median. `--vocab-size` widens the model's output to
a real vocabulary (the ids past the character set decode as `?`), where the draw itself costs something.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

from benchmarks.harness import load_average, measure_in_child, median, print_child_result
from twinkle_exp.models import CharTokenizer, encode_prompt
from twinkle_exp.sampling.generate import Decoding, SamplingOptions, generate, left_pad

METHODS = ("cascade", "shared", "per_row", "hf_generate")


class NoEosTokenizer(CharTokenizer):
    """The character tokenizer without an end of sequence, so every sample runs to `max_new_tokens`."""

    @property
    def eos_token_id(self) -> None:
        return None


class WideTokenizer(NoEosTokenizer):
    """`NoEosTokenizer` for a model with `vocab_size` outputs: the ids past the character set decode as `?`."""

    def __init__(self, vocab_size: int | None = None) -> None:
        super().__init__()
        self._width = vocab_size or super().vocab_size

    @property
    def vocab_size(self) -> int:
        return self._width

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        chars = super().vocab_size
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return "".join(
            "?" if i >= chars else super(WideTokenizer, self).decode([i], skip_special_tokens) for i in ids
        )


def tiny_qwen2(vocab_size: int, seed: int = 0):
    """A random Qwen2 of ~0.6M parameters: hidden 128, 4 layers, 4 heads (2 key/value), MLP 512, tied."""
    from twinkle_exp.models import build_tiny_qwen2

    model = build_tiny_qwen2(
        vocab_size,
        hidden_size=128,
        intermediate_size=512,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=512,
        seed=seed,
    ).eval()
    model.generation_config.eos_token_id = None
    return model


def make_prompts(n: int, max_chars: int, seed: int = 0) -> list[str]:
    """`n` distinct random strings of `max_chars / 2 .. max_chars` letters and digits."""
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789+="
    return ["".join(rng.choices(alphabet, k=rng.randint(max_chars // 2, max_chars))) for _ in range(n)]


# Each of the sampler's three ways to decode, by the method name the benchmark prints.
DECODINGS = {"cascade": Decoding.CASCADE, "shared": Decoding.COPIED, "per_row": Decoding.PER_ROW}


def sample(method: str, model, tokenizer, prompts: list[str], spec: dict, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    if method in ("cascade", "shared", "per_row"):
        generate(
            model,
            tokenizer,
            prompts,
            SamplingOptions(
                max_new_tokens=spec["new_tokens"], group_size=spec["group_size"], temperature=1.0
            ),
            generator=gen,
            decoding=DECODINGS[method],
        )
        return
    ids, mask = left_pad([encode_prompt(tokenizer, p) for p in prompts], tokenizer.pad_token_id, "cpu")
    torch.manual_seed(seed)  # generate draws from the global generator
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        num_return_sequences=spec["group_size"],
        max_new_tokens=spec["new_tokens"],
        pad_token_id=tokenizer.pad_token_id,
    )
    assert out.shape[1] == ids.shape[1] + spec["new_tokens"], "generate stopped early"


def run_case(spec: dict) -> dict:
    """In the child: one warm-up call, then the median time of `iters` calls."""
    torch.set_num_threads(spec["threads"])
    tokenizer = WideTokenizer(spec.get("vocab_size"))
    model = tiny_qwen2(tokenizer.vocab_size)
    prompts = make_prompts(spec["prompts"], spec["prompt_chars"])
    with torch.inference_mode():
        sample(spec["method"], model, tokenizer, prompts, spec, seed=0)
        walls, cpus = [], []
        for i in range(spec["iters"]):
            wall, cpu = time.perf_counter(), time.process_time()
            sample(spec["method"], model, tokenizer, prompts, spec, seed=i + 1)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    tokens = spec["prompts"] * spec["group_size"] * spec["new_tokens"]
    seconds, cpu_seconds = statistics.median(walls), statistics.median(cpus)
    return {"seconds": seconds, "tokens_per_s": tokens / seconds, "tokens_per_cpu_s": tokens / cpu_seconds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prompt-chars", type=int, default=64, help="longest prompt, in characters")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=5, help="timed calls per subprocess")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument(
        "--vocab-size", type=int, default=None, help="model outputs (default: the characters)"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print_child_result(run_case(json.loads(args.child)))
        return

    print(
        f"sampling: {args.prompts} prompts x {args.group_size} samples, {args.new_tokens} new tokens, prompts of "
        f"{args.prompt_chars // 2}-{args.prompt_chars} characters, tiny Qwen2 with "
        f"{args.vocab_size or NoEosTokenizer().vocab_size} outputs, {args.threads} thread(s), "
        f"median of {args.repeats} x {args.iters}"
    )
    print(f"before: {load_average()}", flush=True)
    runs: dict[str, list] = {m: [] for m in args.methods}
    for repeat in range(args.repeats):
        for method in args.methods:
            spec = {k: v for k, v in vars(args).items() if k not in ("methods", "repeats", "child")}
            m = measure_in_child("benchmarks.sampling", dict(spec, method=method))
            runs[method].append(m)
            print(
                f"  repeat {repeat} {method:<12} {m.result['tokens_per_s']:9.0f} tokens/s "
                f"({m.result['seconds']:.3f} s) {m.result['tokens_per_cpu_s']:9.0f} tokens/cpu-s | others used {m.others_cores:.2f} cores, "
                f"load {m.load_before[0]:.2f} -> {m.load_after[0]:.2f}{'  BUSY' if m.busy else ''}",
                flush=True,
            )
    print(f"after: {load_average()}")
    print(
        f"{'method':<13}{'tokens/s':>10}{'vs generate':>13}{'tokens/cpu-s':>14}{'vs generate':>13}  busy runs"
    )
    rates = {}
    for key in ("tokens_per_s", "tokens_per_cpu_s"):
        rates[key] = {m: median([r.result[key] for r in runs[m]]) for m in args.methods}
    for m in args.methods:
        busy = sum(r.busy for r in runs[m])
        print(f"{m:<13}", end="")
        for key, rate in rates.items():
            base = rate.get("hf_generate")
            ratio = f"{rate[m] / base:.2f}x" if base else "-"
            print(f"{rate[m]:>{10 if key == 'tokens_per_s' else 14}.0f}{ratio:>13}", end="")
        print(f"  {busy}/{len(runs[m])}{'  BUSY MACHINE' if busy else ''}")


if __name__ == "__main__":
    main()
