"""Peak memory and time of per-token log-probs, naive `log_softmax + gather` against `selective_log_softmax`.

    python -m twinkle_exp.benchmarks.logprobs --tokens 4096 --vocab 32000 --dtype bfloat16

Each method runs forward + backward in its own subprocess, so the peak resident memory it reports belongs to
that method alone (on CUDA, the allocator's peak instead).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

from twinkle_exp.loss.logprobs import selective_log_softmax


def _naive(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, labels[:, None]).squeeze(-1)


def _peak_mib(device: str) -> float:
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def measure(method: str, tokens: int, vocab: int, dtype: str, device: str) -> dict:
    """Run one method once; return its extra peak memory (MiB) over the inputs and its wall time."""
    gen = torch.Generator(device=device).manual_seed(0)
    logits = (
        torch.randn(tokens, vocab, generator=gen, device=device)
        .to(getattr(torch, dtype))
        .requires_grad_(True)
    )
    labels = torch.randint(0, vocab, (tokens,), generator=gen, device=device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = _peak_mib(device) if device == "cuda" else _current_rss_mib()
    start = time.perf_counter()
    logps = _naive(logits, labels) if method == "naive" else selective_log_softmax(logits, labels)
    logps.sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"method": method, "extra_peak_mib": _peak_mib(device) - before, "seconds": seconds}


def _current_rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.tokens, args.vocab, args.dtype, args.device)))
        return
    input_mib = args.tokens * args.vocab * torch.finfo(getattr(torch, args.dtype)).bits / 8 / 2**20
    print(f"logits [{args.tokens}, {args.vocab}] {args.dtype} on {args.device}: {input_mib:.0f} MiB")
    print(f"{'method':<12}{'extra peak MiB':>16}{'seconds':>10}")
    for method in ("naive", "selective"):
        cmd = [sys.executable, "-m", "twinkle_exp.benchmarks.logprobs", "--child", method]
        cmd += [
            "--tokens",
            str(args.tokens),
            "--vocab",
            str(args.vocab),
            "--dtype",
            args.dtype,
            "--device",
            args.device,
        ]
        result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        print(f"{method:<12}{result['extra_peak_mib']:>16.0f}{result['seconds']:>10.2f}")


if __name__ == "__main__":
    main()
