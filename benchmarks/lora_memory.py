"""Peak memory of RL updates with LoRA (reference = the adapter-disabled policy) against full fine-tuning
(reference = a frozen copy), on a small random Qwen2 built from a config.

    python -m benchmarks.lora_memory --repeats 3

Each case runs in its own subprocess (model, reference, optimizer, a few GRPO steps with a KL penalty) and
reports its peak resident memory (the kernel's high-water mark) above what the process held after its
imports; the table shows the median over `--repeats` runs, the cases alternating, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from benchmarks.harness import REPO_ROOT

CASES = {  # name -> (LoRA, gradient checkpointing)
    "full": (False, False),
    "lora": (True, False),
    "full_gc": (False, True),
    "lora_gc": (True, True),
}


# The settings a child needs to build and run its case.
_MEASURED = (
    "steps",
    "vocab",
    "hidden",
    "intermediate",
    "layers",
    "heads",
    "kv_heads",
    "rank",
    "batch",
    "seq",
)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def measure(case: str, args: argparse.Namespace) -> dict:
    """Build the case's model, reference and optimizer, run `args.steps` updates; memory and time."""
    import peft  # noqa: F401  (imported before the baseline, so no case is charged for it)
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from twinkle_exp.loss import GRPOLoss
    from twinkle_exp.models import LoraSettings, enable_gradient_checkpointing
    from twinkle_exp.models.lora import apply_lora, trainable_parameters
    from twinkle_exp.policy.logprobs import sequence_logps
    from twinkle_exp.policy.reference import Reference

    baseline = _rss_mib()  # imports done, nothing built
    lora, checkpointing = CASES[case]
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        tie_word_embeddings=True,  # as Qwen2.5-0.5B
    )
    model = Qwen2ForCausalLM(config)
    if checkpointing:
        enable_gradient_checkpointing(model)
    if lora:
        model = apply_lora(model, LoraSettings(r=args.rank, alpha=2.0 * args.rank))
    reference = Reference.of(model)
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=1e-5)
    loss_fn = GRPOLoss(beta=0.04)

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)  # [B, T]
    mask = torch.ones_like(ids)  # [B, T]
    positions = torch.arange(args.seq).expand(args.batch, args.seq)  # [B, T]
    labels = ids.clone()  # [B, T]: the second half of each row is the completion
    labels[:, : args.seq // 2] = -100
    advantages = torch.randn(args.batch, generator=g)  # [B]
    start = time.perf_counter()
    for _ in range(args.steps):
        with reference.weights() as ref_model:
            ref_logps, _ = sequence_logps(ref_model, ids, mask, positions, labels)
        model.train()
        logps, _ = sequence_logps(model, ids, mask, positions, labels)
        out = loss_fn(logps=logps, labels=labels, advantages=advantages, ref_logps=ref_logps)
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        optimizer.step()
    seconds = (time.perf_counter() - start) / args.steps
    count = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in trainable_parameters(model))
    copied = 0 if reference.shares_policy else sum(p.numel() for p in reference.model.parameters())
    return {
        "extra_mib": _peak_rss_mib() - baseline,
        # What the weights alone account for (fp32): policy, gradients and AdamW's two moments of the
        # trained parameters, and the reference's copy.
        "state_mib": (count + 3 * trained + copied) * 4 / 2**20,
        "params_m": count / 1e6,
        "trained_m": trained / 1e6,
        "reference_copy_m": copied / 1e6,
        "seconds_per_step": seconds,
    }


def _child(case: str, argv: list[str]) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.lora_memory", *argv, "--child", case]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"case {case} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _print_table(runs: dict[str, list[dict]]) -> None:
    header = [
        "params M",
        "trained M",
        "ref copy M",
        "weights+optim MiB",
        "peak extra MiB",
        "(min-max)",
        "s/step",
    ]
    print(f"{'case':<9}" + "".join(f"{h:>{len(h) + 2}}" for h in header))
    for case, results in runs.items():
        peaks = [r["extra_mib"] for r in results]
        first = results[0]
        cells = [
            f"{first['params_m']:.2f}",
            f"{first['trained_m']:.2f}",
            f"{first['reference_copy_m']:.2f}",
            f"{first['state_mib']:.0f}",
            f"{statistics.median(peaks):.0f}",
            f"{min(peaks):.0f}-{max(peaks):.0f}",
            f"{statistics.median(r['seconds_per_step'] for r in results):.2f}",
        ]
        print(f"{case:<9}" + "".join(f"{c:>{len(h) + 2}}" for c, h in zip(cells, header, strict=True)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default="full,lora", help=f"comma-separated, of {sorted(CASES)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--steps", type=int, default=2, help="updates per run (the optimizer state exists from 1)"
    )
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--intermediate", type=int, default=1408)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank, adapters on every linear layer")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args)))
        return
    cases = args.cases.split(",")
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        raise SystemExit(f"--cases: unknown {unknown}; choose from {sorted(CASES)}")
    forwarded = [f"--{name.replace('_', '-')}={getattr(args, name)}" for name in _MEASURED]
    print(f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    runs: dict[str, list[dict]] = {c: [] for c in cases}
    for r in range(args.repeats):
        for case in cases if r % 2 == 0 else reversed(cases):  # alternate, so drift hits every case alike
            runs[case].append(_child(case, forwarded))
    print(f"load average after:  {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"Qwen2 hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}, tied; fp32 on CPU; batch "
        f"{args.batch} x {args.seq} tokens; {args.steps} GRPO steps (beta 0.04); median of {args.repeats}"
    )
    _print_table(runs)


if __name__ == "__main__":
    main()
