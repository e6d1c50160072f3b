"""The real model's RL step at this machine's limit: SmolLM2-135M-Instruct in the `smollm2_addition` preset.

    python -m benchmarks.real_step [--rollouts 4] [--repeats 3] [--full] [--threads N]
                                               [--sampler-iters 3] [--profile] [--override KEY=VALUE ...]

Each repeat is its own process (`harness.measure_in_child`): the preset's config (`+experiment=
smollm2_addition`: 8 prompts x 8 samples, 24 new tokens, temperature 0.7, LoRA r 16 on every linear layer,
one pass per rollout in 4 minibatches, reward=math), composed by Hydra and built as a run builds it
(`training/from_config.py`), trained
for `--rollouts` rollouts (validating on 8 problems, not 128, outside the timed stages); the first rollout is dropped as warm-up. It prints:
- seconds per rollout of rollout / reference / update (`time/*_s` from the fit's metrics.csv);
- the update's model FLOPs (`flops.py`: 4 x base parameters x tokens under LoRA, 6 x with `--full`,
  counting the tokens each pass really ran, with prompt sharing) over `time/update_s`, against this
  process's own float32 matmul rate at the same thread count, on 2048 x 2048 x 2048 and on the model's
  MLP shape `[tokens, hidden] @ [hidden, intermediate]` (tokens: an update forward's, on average);
- our sampler's tokens/s (`generate`, rows x new tokens / seconds, median of `--sampler-iters` after a
  warm-up) against `model.generate(do_sample=True)`, same model, prompts, temperature and budget, EOS off
  for both so that every row samples the whole budget.
`--full` trains every weight (`policy.lora=null`) instead; `--override` adds a Hydra override after the
preset's (repeatable: `--override policy.lora.fused=false`, to measure one change alone); `--profile` runs one rollout under
torch.profiler and prints the update's operators by self CPU time, then its matrix products by class (the
weights', the low-rank adapters', the head's), each at its own rate and as a share of the 2048^3 rate;
`--compile` puts each decoder layer under `torch.compile(dynamic=True)` (no run option does: a probe of
whether fusing the elementwise work pays; its compiles fall in the rollouts where shapes are new). Medians are over every repeat's kept
rollouts; the load average is printed before and after, and a repeat during which other processes used
more than `harness.BUSY_CORES` cores is marked BUSY.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import torch

from benchmarks.harness import load_average, measure_in_child, print_child_result
from benchmarks.real_step_child import STAGES, run_child
from twinkle_exp import metric_names as M


def _g(flops: float) -> str:
    return f"{flops / 1e9:.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=4, help="per repeat, the first dropped as warm-up")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="full fine-tuning (policy.lora=null)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--sampler-iters", type=int, default=3, help="timed sampler calls (0: skip)")
    parser.add_argument("--profile", action="store_true", help="one rollout under torch.profiler")
    parser.add_argument(
        "--compile", action="store_true", help="each decoder layer under torch.compile(dynamic=True): a probe"
    )
    parser.add_argument(
        "--override", action="append", default=[], help="a Hydra override after the preset's (repeatable)"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print_child_result(run_child(json.loads(args.child)))
        return
    if args.rollouts < 1 or args.repeats < 1 or args.threads < 1 or args.sampler_iters < 0:
        parser.error("--rollouts, --repeats and --threads must be >= 1, --sampler-iters >= 0")
    if args.profile:
        args.rollouts, args.repeats, args.sampler_iters = 1, 1, 0
    spec = {
        k: getattr(args, k) for k in ("rollouts", "full", "threads", "sampler_iters", "profile", "compile")
    }
    spec["overrides"] = list(args.override)
    case = ("full fine-tuning" if args.full else "LoRA") + (", compiled layers" if args.compile else "")
    extra = "".join(f" {o}" for o in args.override)
    print(f"SmolLM2-135M-Instruct, +experiment=smollm2_addition{extra}, {case}, {args.threads} thread(s)")
    print(f"before: {load_average()} ({os.cpu_count()} CPUs)", flush=True)
    env = {"OMP_NUM_THREADS": str(args.threads)}
    runs = []
    for repeat in range(args.repeats):
        m = measure_in_child("benchmarks.real_step", spec, env=env)
        runs.append(m)
        res = m.result
        for i, r in enumerate(res["rollouts"]):
            print(
                f"  repeat {repeat} rollout {i}: rollout {r[M.TIME_ROLLOUT]:.2f} s, reference "
                f"{r[M.TIME_REFERENCE]:.2f} s, update {r[M.TIME_UPDATE]:.2f} s = {_g(r['flops'])} GFLOP at "
                f"{_g(r['flops'] / r[M.TIME_UPDATE])} GFLOP/s; tokens {r['tokens']}"
            )
        rates = res["matmul"] | {f"sampler {k}": v for k, v in res["sampler"].items()}
        print(
            f"  repeat {repeat}: matmul 2048^3 {_g(rates['square'])} GFLOP/s, {res['mlp_shape']} "
            f"{_g(rates['mlp'])} GFLOP/s"
            + "".join(f"; {k} {v:.0f} tokens/s" for k, v in rates.items() if k.startswith("sampler"))
            + f" | others used {m.others_cores:.2f} cores, load {m.load_before[0]:.2f} -> "
            f"{m.load_after[0]:.2f}{'  BUSY' if m.busy else ''}",
            flush=True,
        )
        if res["profile"]:
            print(res["profile"])
    print(f"after: {load_average()}")
    _summary(runs, args)


def _summary(runs, args) -> None:
    med = statistics.median
    pooled = [r for m in runs for r in m.result["rollouts"]]
    params = runs[0].result["params"]
    print(f"matmul parameters: {params} (trunk: decoder linears; head: the tied embedding)")
    print(f"medians over {len(runs)} repeat(s) x {len(pooled) // len(runs)} rollout(s):")
    for stage in STAGES:
        print(f"  {stage:<18} {med([r[stage] for r in pooled]):8.3f} s")
    achieved = med([r["flops"] / r[M.TIME_UPDATE] for r in pooled])
    print(
        f"  update             {_g(med([r['flops'] for r in pooled]))} GFLOP per rollout, {_g(achieved)} GFLOP/s"
    )
    for key, label in (("square", "2048^3"), ("mlp", f"MLP shape {runs[0].result['mlp_shape']}")):
        own = med([m.result["matmul"][key] for m in runs])
        print(f"  own matmul {label:<28} {_g(own)} GFLOP/s: the update reaches {achieved / own:.1%}")
    sampler = [m.result["sampler"] for m in runs if m.result["sampler"]]
    if sampler:
        ours, hf = med([s["ours"] for s in sampler]), med([s["hf_generate"] for s in sampler])
        print(
            f"  sampler            ours {ours:.0f} tokens/s, model.generate {hf:.0f} tokens/s ({ours / hf:.2f}x)"
        )
    busy = sum(m.busy for m in runs)
    print(
        f"busy repeats: {busy}/{len(runs)}" + ("  BUSY MACHINE: these figures are not claims" if busy else "")
    )


if __name__ == "__main__":
    main()
