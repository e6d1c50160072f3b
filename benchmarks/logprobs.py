"""Peak memory and time of per-token log-probs, forward + backward, at a real model's head geometry.

    python -m benchmarks.logprobs            # Qwen2.5-0.5B's head: 4096 tokens, 896 -> 151,936
    python -m benchmarks.logprobs --device cuda --backend triton   # the fused tile kernels

Three methods, from the final hidden states `[N, H]` and the head `[V, H]`:
- `hidden`: `hidden_log_probs`, tiles of logits, never the full `[N, V]`; `--backend` picks who does each
  tile's elementwise work: "torch" (PyTorch ops), "triton" (one fused kernel per tile) or "auto" (the
  library's default: torch until `tile_backend.FUSED_BY_DEFAULT`, then triton on CUDA when installed);
- `naive`: `lm_head`, then `log_softmax(logits.float())` and `gather`;
- `selective`: `lm_head`, then `selective_log_softmax` (chunked, on the full logits).

Each (dtype, method, repeat) runs in its own subprocess, so its peak memory is its own (see `harness.py`);
repeats are interleaved across methods so that a change of machine load hits all of them alike. A process
warms up, then times `--iters` passes (10 on a GPU, where one takes milliseconds; 1 on a CPU, where it takes
seconds) and reports their median. The table gives medians over processes, and each case's extra peak
memory and time relative to `naive`. `--chunk-elements` overrides the chunk size of `hidden` and `selective`.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from benchmarks.harness import (
    PeakMemory,
    load_average,
    measure_in_child,
    median,
    print_child_result,
)
from twinkle_exp.logprobs import hidden_log_probs, selective_log_softmax
from twinkle_exp.logprobs.chunked_softmax import chunk_elements
from twinkle_exp.logprobs.hidden_logprobs import DEFAULT_CHUNK_TOKENS
from twinkle_exp.logprobs.tile_backend import BACKENDS, tile_loops

METHODS = ("hidden", "naive", "selective")


def log_probs(
    method: str,
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    chunk: int | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """hidden [N, H], weight [V, H], labels [N] -> logps [N] float32, by `method`; `chunk`: float32 elements
    of logits per chunk (None: the library's default for the device); `backend`: `hidden`'s tile loops."""
    n, v = labels.shape[0], weight.shape[0]
    if method == "hidden":
        chunk_vocab = None if chunk is None else max(1, chunk // min(n, DEFAULT_CHUNK_TOKENS))
        return hidden_log_probs(hidden, weight, labels, chunk_vocab=chunk_vocab, backend=backend)[0]
    logits = torch.nn.functional.linear(hidden, weight)  # [N, V], what lm_head returns
    if method == "naive":
        return torch.log_softmax(logits.float(), dim=-1).gather(-1, labels[:, None]).squeeze(-1)
    return selective_log_softmax(logits, labels, chunk_tokens=None if chunk is None else max(1, chunk // v))


def run_case(spec: dict) -> dict:
    """In the child: build the inputs, warm up, then time `iters` forward + backward passes (their median)."""
    torch.set_num_threads(spec["threads"])
    device, dtype = spec["device"], getattr(torch, spec["dtype"])
    gen = torch.Generator(device=device).manual_seed(0)
    n, h, v = spec["tokens"], spec["hidden"], spec["vocab"]
    hidden = torch.randn(n, h, generator=gen, device=device).to(dtype).requires_grad_(True)
    # std 0.02: logits of std ~0.6, as a trained head's; the head trains unless the case says frozen
    weight = (torch.randn(v, h, generator=gen, device=device) * 0.02).to(dtype)
    weight.requires_grad_(spec["head"] == "trained")
    labels = torch.randint(0, v, (n,), generator=gen, device=device)
    upstream = torch.randn(n, generator=gen, device=device)  # d loss / d logp, as a loss would give

    method, chunk, backend = spec["method"], spec["chunk_elements"], spec.get("backend", "auto")
    # One-time set-up costs (lazy kernel loading, library heuristics): on a GPU at the full size, which
    # takes milliseconds; on a CPU, where a pass takes tens of seconds, on a few tokens.
    warm = n if device == "cuda" else 16
    log_probs(method, hidden[:warm], weight, labels[:warm], chunk, backend).sum().backward()
    hidden.grad = weight.grad = None  # each pass's gradients count in its peak
    walls, cpus = [], []
    with PeakMemory(device) as memory:
        for _ in range(spec["iters"]):
            hidden.grad = weight.grad = None
            wall, cpu = time.perf_counter(), time.process_time()
            (log_probs(method, hidden, weight, labels, chunk, backend) * upstream).sum().backward()
            if device == "cuda":
                torch.cuda.synchronize()
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    return {"wall_s": median(walls), "cpu_s": median(cpus), "extra_peak_mib": memory.extra_mib}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=4096, help="completion tokens N")
    parser.add_argument("--hidden", type=int, default=896, help="hidden size H")
    parser.add_argument("--vocab", type=int, default=151936, help="vocabulary size V")
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--head", default="trained", choices=["trained", "frozen"], help="frozen: as LoRA")
    parser.add_argument(
        "--backend",
        default="auto",
        choices=BACKENDS,
        help="hidden's tile loops (auto: the library's default, torch for now)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--iters", type=int, default=None, help="timed passes per process (cuda 10, cpu 1)")
    parser.add_argument(
        "--chunk-elements", type=int, default=None, help="float32 logits per chunk (default: the device's)"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.iters is None:
        args.iters = 10 if args.device == "cuda" else 1
    if args.child:
        print_child_result(run_case(json.loads(args.child)))
        return
    try:  # refuse a backend the device cannot run before any child starts
        tile_loops(args.backend, torch.device(args.device), torch.float32)
    except ValueError as err:
        parser.error(str(err))

    print(
        f"log-probs forward + backward: {args.tokens} tokens, hidden {args.hidden}, vocabulary {args.vocab}, "
        f"head {args.head}, {args.device}, {args.threads} thread(s), hidden's backend {args.backend}; chunks of "
        f"{args.chunk_elements or chunk_elements(args.device)} float32 logits; median over {args.repeats} "
        f"processes of each one's median of {args.iters} passes"
    )
    print(f"before: {load_average()}", flush=True)
    runs: dict[tuple[str, str], list] = {}
    for repeat in range(args.repeats):
        for dtype in args.dtypes:
            for method in args.methods:
                spec = dict(vars(args), dtype=dtype, method=method)
                del spec["dtypes"], spec["methods"], spec["repeats"], spec["child"]
                m = measure_in_child("benchmarks.logprobs", spec)
                runs.setdefault((dtype, method), []).append(m)
                print(
                    f"  repeat {repeat} {dtype:<9} {method:<10} {m.result['extra_peak_mib']:8.0f} MiB "
                    f"{m.result['wall_s']:8.4f} s wall {m.result['cpu_s']:8.4f} s cpu | others used "
                    f"{m.others_cores:.2f} cores, load {m.load_before[0]:.2f} -> {m.load_after[0]:.2f}"
                    f"{'  BUSY' if m.busy else ''}",
                    flush=True,
                )
    print(f"after: {load_average()}")
    print_table(runs, args.dtypes, args.methods)


def print_table(runs: dict, dtypes: list[str], methods: list[str]) -> None:
    """Medians per (dtype, method), and ratios to naive's medians of the same dtype."""
    print(
        f"{'dtype':<10}{'method':<11}{'extra peak MiB':>15}{'vs naive':>9}{'wall s':>9}{'vs naive':>9}",
        end="",
    )
    print(f"{'cpu s':>8}{'vs naive':>9}  busy runs")
    for dtype in dtypes:
        med = {
            m: {
                k: median([r.result[k] for r in runs[dtype, m]])
                for k in ("extra_peak_mib", "wall_s", "cpu_s")
            }
            for m in methods
        }
        base = med.get("naive")
        for m in methods:
            row = med[m]
            busy = sum(r.busy for r in runs[dtype, m])
            mem_ratio = f"{100 * row['extra_peak_mib'] / base['extra_peak_mib']:.0f}%" if base else "-"
            wall_ratio = f"{row['wall_s'] / base['wall_s']:.2f}x" if base else "-"
            cpu_ratio = f"{row['cpu_s'] / base['cpu_s']:.2f}x" if base else "-"
            print(
                f"{dtype:<10}{m:<11}{row['extra_peak_mib']:>15.0f}{mem_ratio:>9}{row['wall_s']:>9.4f}"
                f"{wall_ratio:>9}{row['cpu_s']:>8.4f}{cpu_ratio:>9}  {busy}/{len(runs[dtype, m])}"
                f"{'  BUSY MACHINE' if busy else ''}"
            )


if __name__ == "__main__":
    main()
