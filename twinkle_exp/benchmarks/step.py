"""Seconds per rollout of the RL step, split as the trainer logs it: rollout, reference pass, update.

    python -m twinkle_exp.benchmarks.step [--rollouts 12] [--repeats 3] [--against PATH] [--fused-adamw]

The setting: 2-digit addition, 8 prompts x 8 samples, 4 new tokens, beta 0.04, mu 2, one minibatch, on the
built-in policy (default size) and on a small random Qwen2 (hidden 128, 4 layers, character vocabulary;
needs `transformers`). Each repeat of a case is its own process: a Lightning fit of `--rollouts` rollouts
whose first 2 are dropped as warm-up; a figure is the median over the kept rollouts of every repeat of
`time/{rollout,reference,update}_s` from its metrics.csv. `--against PATH` runs the same cases on another
checkout's code (e.g. `git worktree add /tmp/before <commit>`), side by side in the same invocation. The
machine's load average is printed before and after; on a busy machine the figures are marked as such.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = ("tiny", "hf")
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
        from twinkle_exp.config import AdvantageConfig, OptimConfig, RolloutConfig, TrainerConfig
        from twinkle_exp.data import PromptStream
        from twinkle_exp.module import PolicyModule
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


def _worker(case: str, rollouts: int, out_dir: str, fused_adamw: bool = False) -> None:
    """One fit of `rollouts` rollouts; metrics.csv lands in `out_dir`."""
    import torch
    from torch.utils.data import DataLoader

    from twinkle_exp.loss import GRPOLoss
    from twinkle_exp.rewards import RewardFunction, RewardSet, exact_match
    from twinkle_exp.tasks import AdditionTask

    x = _layout()
    torch.manual_seed(0)
    policy = _policy(case, x)
    # Only this layout has the option; an older checkout runs its own (the default) optimizer.
    extra = {"fused_adamw": True} if fused_adamw else {}
    optim = x.OptimConfig(lr=1e-5, mu=2, num_minibatches=1, **extra)
    module = x.PolicyModule(
        policy,
        AdditionTask(min_digits=2, max_digits=2, num_validation=16),
        RewardSet([RewardFunction("exact", exact_match)]),
        GRPOLoss(beta=0.04),
        rollout=x.RolloutConfig(prompts_per_step=8, group_size=8, max_new_tokens=4),
        advantage=x.AdvantageConfig(),
        optim=optim,
        trainer=x.TrainerConfig(val_every=10_000, samples_every=10_000),
    )
    trainer = bare_trainer(rollouts * optim.mu * optim.num_minibatches, out_dir)
    trainer.fit(module, DataLoader(x.PromptStream(module.task, 8, seed=0), batch_size=None))
    for logger in trainer.loggers:
        logger.save()
    params = sum(p.numel() for p in policy.model.parameters())
    Path(out_dir, "params.json").write_text(json.dumps({"params": params}))


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
    case: str, rollouts: int, tree: str | None, fused_adamw: bool = False
) -> tuple[dict[str, list[float]], int]:
    tree = tree or str(HERE)
    with tempfile.TemporaryDirectory() as out:
        # Run this file, not the module: the other checkout need not have it.
        cmd = [sys.executable, __file__, "--worker", case, "--rollouts", str(rollouts), "--out", out]
        cmd += ["--tree", tree] + (["--fused-adamw"] if fused_adamw else [])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{case} ({tree}) failed:\n{proc.stderr[-3000:]}")
        with open(Path(out, "metrics.csv")) as f:
            rows = [r for r in csv.DictReader(f) if r.get(STAGES[0])][WARMUP_ROLLOUTS:]
        params = json.loads(Path(out, "params.json").read_text())["params"]
    return {stage: [float(r[stage]) for r in rows] for stage in STAGES}, params


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--against", default=None, help="another checkout's root, measured side by side")
    parser.add_argument(
        "--fused-adamw", action="store_true", help="this checkout with optim.fused_adamw=true"
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _import_from(args.tree)
        _worker(args.worker, args.rollouts, args.out, args.fused_adamw)
        return

    cpus = os.cpu_count() or 1
    load_before = os.getloadavg()
    print(
        f"load average before: {load_before[0]:.2f} ({cpus} CPUs); torch threads: OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}"
    )
    here = "this checkout" + (" fused_adamw" if args.fused_adamw else "")
    trees = [(here, None)] + ([(f"against {args.against}", args.against)] if args.against else [])
    print(
        f"{'case':<6} {'code':<28} {'params':>8} {'rollout s':>10} {'reference s':>12} {'update s':>9} {'total s':>8}"
    )
    for case in args.cases.split(","):
        pooled = {label: {stage: [] for stage in STAGES} for label, _ in trees}
        params = {}
        # The checkouts take turns, repeat by repeat, so that a change in the machine's load falls on both.
        for _ in range(args.repeats):
            for label, tree in trees:
                times, params[label] = _run_case(case, args.rollouts, tree, args.fused_adamw and tree is None)
                for stage in STAGES:
                    pooled[label][stage] += times[stage]
        for label, _ in trees:
            medians = [statistics.median(pooled[label][stage]) for stage in STAGES]
            print(
                f"{case:<6} {label[:28]:<28} {params[label]:>8} {medians[0]:>10.4f} {medians[1]:>12.4f} "
                f"{medians[2]:>9.4f} {sum(medians):>8.4f}"
            )
    load_after = os.getloadavg()
    busy = max(load_before[0], load_after[0]) > 0.5 * cpus
    print(
        f"load average after: {load_after[0]:.2f}"
        + ("  BUSY MACHINE: these figures are not claims" if busy else "")
    )
    print(
        f"medians over {args.repeats} processes x {args.rollouts - WARMUP_ROLLOUTS} rollouts (first {WARMUP_ROLLOUTS} dropped)"
    )


if __name__ == "__main__":
    main()
