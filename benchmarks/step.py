"""Seconds per rollout of the RL step, split as the trainer logs it: rollout, reference pass, update.

    python -m benchmarks.step [--rollouts 12] [--repeats 3] [--against PATH]
        [--variants default,fused_adamw,compile]

The setting: 2-digit addition prompts, 8 prompts x 8 samples, 4 new tokens, beta 0.04, mu 2, one minibatch,
on the built-in policy (default size) and on a small random Qwen2 (hidden 128, 4 layers, character
vocabulary; needs `transformers`). The reward is the share of digits in a completion, so that a random
policy's groups differ and every update has a gradient: with exact-match rewards a random policy scores 0
everywhere, every advantage is 0, the policy stays equal to the reference (no KL gradient either), and the
update would time AdamW on all-zero gradients (torch's CPU `sqrt` of 0 is about 20x slower than of a normal
number). Each repeat of a case is its own process: a Lightning fit of `--rollouts` rollouts whose first 2
are dropped as warm-up; a figure is the median over the kept rollouts of every repeat of
`time/{rollout,reference,update}_s` from its metrics.csv, and `warm-up s` the median over repeats of the
dropped rollouts' seconds (where a compile shows). `processes s` is the range of the repeats' own median
totals: on a shared machine whole processes run faster or slower than others of the same code. `weights` is a fingerprint of the weights after the fit,
one per distinct result over the repeats: rows that compute the same thing bit for bit show the same one.
`--against PATH` runs the same cases on another checkout's code (e.g. `git worktree add /tmp/before
<commit>`), side by side in the same invocation, and `x against` is each row's total over its total.
`--variants` adds rows of this checkout with opt-in settings: `fused_adamw` (`optim.fused_adamw=true`) and
`compile` (each layer of the policy under `torch.compile(dynamic=True)`, compiled in the warm-up
rollouts). The machine's load average is printed before and after; the figures are marked busy when it
exceeded the benchmark's own process plus half of the other CPUs.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = ("tiny", "hf")
VARIANTS = ("default", "fused_adamw", "compile")
STAGES = ("time/rollout_s", "time/reference_s", "time/update_s")
WARMUP_ROLLOUTS = 2
HERE = Path(__file__).resolve().parents[2]  # this checkout's root


def _layout():
    """The classes the worker builds, from this layout or the flat one before the house by concern
    (`twinkle_exp.module`, `.config`, `.data`, `.policy`), so `--against` can run an older checkout."""
    try:
        from twinkle_exp.config.schema import AdvantageConfig, OptimConfig, RolloutConfig, TrainerConfig
        from twinkle_exp.policy.build import Policy, tiny_policy
        from twinkle_exp.tasks.prompt_stream import PromptStream
        from twinkle_exp.training.module import PolicyModule
    except ImportError:
        from twinkle_exp.data import PromptStream
        from twinkle_exp.module import PolicyModule

        from twinkle_exp.config import AdvantageConfig, OptimConfig, RolloutConfig, TrainerConfig
        from twinkle_exp.policy import Policy, tiny_policy
    return argparse.Namespace(
        AdvantageConfig=AdvantageConfig,
        OptimConfig=OptimConfig,
        RolloutConfig=RolloutConfig,
        TrainerConfig=TrainerConfig,
        Policy=Policy,
        tiny_policy=tiny_policy,
        PromptStream=PromptStream,
        PolicyModule=PolicyModule,
    )


def _policy(case: str, layout):
    from twinkle_exp.models import CharTokenizer, build_tiny_qwen2

    Policy, tiny_policy = layout.Policy, layout.tiny_policy

    if case == "tiny":
        return tiny_policy()
    tokenizer = CharTokenizer()
    model = build_tiny_qwen2(
        tokenizer.vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_layers=4,
        num_heads=4,
        num_kv_heads=4,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return Policy(model.eval(), tokenizer)


def bare_trainer(max_steps: int, out_dir: str):
    """A CPU Lightning trainer that logs metrics.csv to `out_dir` and does nothing else a run would: no
    progress bar, checkpoint, summary or sanity validation, so that only the stages it times run."""
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger

    return L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        logger=CSVLogger(out_dir, name="", version=""),
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=out_dir,
    )


def digit_share(prompts: list[str], completions: list[str], answers: list[str]) -> list[float]:
    """The share of a completion's characters that are digits: a reward on which a random policy's samples
    differ, so that the benchmark's updates have gradients."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def _layers(model):
    """The policy's repeated layers: the built-in policy's blocks, or a Hugging Face model's decoder layers."""
    return model.blocks if hasattr(model, "blocks") else model.model.layers


def weights_fingerprint(model) -> str:
    """The first 10 hex digits of a hash of every parameter's bytes, in name order.

    Not `lifecycle.checkpoints.weights_digest`: the worker imports the other checkout's package, and the
    rows are comparable only if this file hashes every checkout's weights the same way."""
    digest = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        digest.update(name.encode())
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:10]


def _worker(case: str, rollouts: int, out_dir: str, variant: str = "default", callbacks=()) -> None:
    """One fit of `rollouts` rollouts; metrics.csv lands in `out_dir`. `callbacks`: Lightning callbacks
    added to the fit (the profiler's)."""
    import torch
    from torch.utils.data import DataLoader

    from twinkle_exp.loss import GRPOLoss
    from twinkle_exp.rewards import RewardFunction, RewardSet
    from twinkle_exp.tasks import AdditionTask

    x = _layout()
    torch.manual_seed(0)
    policy = _policy(case, x)
    if variant == "compile":
        for layer in _layers(policy.model):
            layer.compile(dynamic=True)
    # Only this layout has the option; an older checkout runs its own (the default) optimizer.
    extra = {"fused_adamw": True} if variant == "fused_adamw" else {}
    optim = x.OptimConfig(lr=1e-5, mu=2, num_minibatches=1, **extra)
    module = x.PolicyModule(
        policy,
        AdditionTask(min_digits=2, max_digits=2, num_validation=16),
        RewardSet([RewardFunction("digits", digit_share)], truncated_max=None),
        GRPOLoss(beta=0.04),
        rollout=x.RolloutConfig(prompts_per_step=8, group_size=8, max_new_tokens=4),
        advantage=x.AdvantageConfig(),
        optim=optim,
        trainer=x.TrainerConfig(val_every=10_000, samples_every=10_000),
    )
    trainer = bare_trainer(rollouts * optim.mu * optim.num_minibatches, out_dir)
    trainer.callbacks.extend(callbacks)
    trainer.fit(module, DataLoader(x.PromptStream(module.task, 8, seed=0), batch_size=None))
    for logger in trainer.loggers:
        logger.save()
    params = sum(p.numel() for p in policy.model.parameters())
    summary = {"params": params, "weights": weights_fingerprint(policy.model)}
    Path(out_dir, "params.json").write_text(json.dumps(summary))


def _import_from(tree: str) -> None:
    """Make `import twinkle_exp` load `tree`'s package, and check that it did.

    Without the check, a tree that lacks the package (a typo, the wrong folder) falls through to the
    installed one, and the benchmark would compare this checkout with itself."""
    sys.path.insert(0, tree)
    import twinkle_exp

    loaded = Path(twinkle_exp.__file__).resolve()
    if Path(tree).resolve() not in loaded.parents:
        raise SystemExit(f"--against {tree}: twinkle_exp was imported from {loaded.parent}, not from there")


def _run_case(
    case: str, rollouts: int, tree: str | None, variant: str = "default"
) -> tuple[dict[str, list[float]], dict]:
    tree = tree or str(HERE)
    with tempfile.TemporaryDirectory() as out:
        # Run this file, not the module: the other checkout need not have it.
        cmd = [sys.executable, __file__, "--worker", case, "--rollouts", str(rollouts), "--out", out]
        cmd += ["--tree", tree, "--variant", variant]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{case} ({tree}) failed:\n{proc.stderr[-3000:]}")
        with open(Path(out, "metrics.csv")) as f:
            rows = [r for r in csv.DictReader(f) if r.get(STAGES[0])]
        summary = json.loads(Path(out, "params.json").read_text())
    # The dropped rollouts' seconds: where a compile (or any other one-off start-up cost) shows.
    summary["warmup"] = sum(float(r[stage]) for r in rows[:WARMUP_ROLLOUTS] for stage in STAGES)
    kept = rows[WARMUP_ROLLOUTS:]
    return {stage: [float(r[stage]) for r in kept] for stage in STAGES}, summary


def _variants(text: str, parser: argparse.ArgumentParser) -> list[str]:
    names = [v for v in text.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown or not names:
        parser.error(f"--variants: {','.join(unknown) or 'none given'}; choose from {','.join(VARIANTS)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--against", default=None, help="another checkout's root, measured side by side")
    parser.add_argument(
        "--variants", default="default", help=f"this checkout's rows, of {','.join(VARIANTS)}"
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="default", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _import_from(args.tree)
        _worker(args.worker, args.rollouts, args.out, args.variant)
        return
    rows = [
        (f"this checkout {v}" if v != "default" else "this checkout", None, v)
        for v in _variants(args.variants, parser)
    ]
    if args.against:
        rows.append((f"against {args.against}", args.against, "default"))

    cpus = os.cpu_count() or 1
    load_before = os.getloadavg()
    print(
        f"load average before: {load_before[0]:.2f} ({cpus} CPUs); torch threads: OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}"
    )
    print(
        f"{'case':<6} {'code':<30} {'params':>8} {'rollout s':>10} {'reference s':>12} {'update s':>9} "
        f"{'total s':>8} {'processes s':>14} {'x against':>9} {'warm-up s':>9}  weights"
    )
    for case in args.cases.split(","):
        pooled = {label: {stage: [] for stage in STAGES} for label, _, _ in rows}
        warmup = {label: [] for label, _, _ in rows}
        per_process = {label: [] for label, _, _ in rows}  # each process's median total
        weights = {label: set() for label, _, _ in rows}
        params = {}
        # The rows take turns, repeat by repeat, so that a change in the machine's load falls on all of them.
        for _ in range(args.repeats):
            for label, tree, variant in rows:
                times, summary = _run_case(case, args.rollouts, tree, variant)
                for stage in STAGES:
                    pooled[label][stage] += times[stage]
                warmup[label].append(summary["warmup"])
                per_process[label].append(statistics.median(map(sum, zip(*times.values(), strict=True))))
                weights[label].add(summary["weights"])
                params[label] = summary["params"]
        medians = {
            label: [statistics.median(pooled[label][stage]) for stage in STAGES] for label, _, _ in rows
        }
        reference = sum(medians[rows[-1][0]]) if args.against else None
        for label, _, _ in rows:
            m, total = medians[label], sum(medians[label])
            ratio = f"{total / reference:.2f}" if reference else "-"
            # One fingerprint: every repeat ended on the same weights, bit for bit.
            print(
                f"{case:<6} {label[:30]:<30} {params[label]:>8} {m[0]:>10.4f} {m[1]:>12.4f} "
                f"{m[2]:>9.4f} {total:>8.4f} {min(per_process[label]):>7.4f}-{max(per_process[label]):.4f} "
                f"{ratio:>9} {statistics.median(warmup[label]):>9.2f}  "
                f"{'/'.join(sorted(weights[label]))}"
            )
    load_after = os.getloadavg()
    # This benchmark's own process is one runnable thread: busy means more than half of the other CPUs too.
    busy = max(load_before[0], load_after[0]) > 1 + 0.5 * (cpus - 1)
    print(
        f"load average after: {load_after[0]:.2f}"
        + ("  BUSY MACHINE: these figures are not claims" if busy else "")
    )
    print(
        f"medians over {args.repeats} processes x {args.rollouts - WARMUP_ROLLOUTS} rollouts (first {WARMUP_ROLLOUTS} dropped)"
    )


if __name__ == "__main__":
    main()
