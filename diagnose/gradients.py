"""How different two losses' updates are along a run: `python -m diagnose.gradients`.

    python -m diagnose.gradients --against "loss=cispo" [--out grads.csv] [OVERRIDE ...]

The run is the one `python -m twinkle_exp OVERRIDE ...` would train (warm-start from its cache included),
trained by hand with its own loss (loss a) for `trainer.max_steps` optimizer steps on the CPU; `--against`
is what changes for loss b (overrides of the `loss` group). Before each optimizer step, on that step's rows
and the same forward, both losses' gradients are compared (`training/gradient_pair.py`): the cosine, |g_b|
/ |g_a|, and the share of completion tokens whose per-token weights differ (raw, and after one scalar). One
CSV row per optimizer step, then the mean, min and max of each column printed. Every regime knob of the run
config (`rollout.staleness`, `optim.mu`, `optim.num_minibatches`, `rollout.sampler_dtype`, ...) applies.
"""

from __future__ import annotations

import argparse
import csv
import shlex
import statistics
import sys
from pathlib import Path

import torch

from twinkle_exp.config.checks import check_config
from twinkle_exp.config.store import register_configs
from twinkle_exp.errors import UserError
from twinkle_exp.models.hf import set_update_mode
from twinkle_exp.models.lora import trainable_parameters
from twinkle_exp.run import build_module
from twinkle_exp.tasks.prompt_stream import PromptStream
from twinkle_exp.training import gradient_pair, rl_step
from twinkle_exp.training.old_logps import recompute_for_run
from twinkle_exp.training.optimizer import optimizer_and_schedule
from twinkle_exp.training.step_parts import loss_extras

CSV_COLUMNS = ("step", "rollout", *gradient_pair.COLUMNS)


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module
    from hydra.utils import instantiate

    register_configs()
    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    return check_config(cfg), instantiate


class Stepping:
    """A plain optimizer whose step() first runs the gradient check, as Lightning's hook does in a fit (also the
    tests' way to train a module by hand: tests/test_rl_step.py holds it to a Lightning fit)."""

    def __init__(self, module, optimizer) -> None:
        self.module, self.optimizer, self.param_groups = module, optimizer, optimizer.param_groups
        self.checked, self.steps = None, 0

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        o, m = self.module.optim_cfg, self.module
        self.checked = rl_step.check_gradients(
            m.policy, self.optimizer, o.max_grad_norm, m.state.nonfinite, False
        )
        self.optimizer.step()
        self.steps += 1


def compare_along_run(overrides: list[str], against: list[str]) -> list[dict[str, float]]:
    """One row of `CSV_COLUMNS` per optimizer step of the run `overrides` configure, loss a (its own)
    against the loss that `against` configures."""
    on_cpu = [*overrides, "trainer.accelerator=cpu"]  # the by-hand steps below run on the CPU
    typed, instantiate = _compose(on_cpu)
    other, _ = _compose([*on_cpu, *against])
    module, _ = build_module(typed)
    loss_a, loss_b = module.loss_fn, instantiate(other.loss)
    parts, state, o = module.parts, module.state, module.optim_cfg
    if loss_b.beta > 0:  # the reference both need is built while loss b is set, then kept
        parts.use_loss(loss_b, started=False)
        parts.use_loss(loss_a, started=False)
    parts.recompute_old_logps = recompute_for_run(
        o.old_logps, str(typed.trainer.precision), module.policy, o.rollout_correction.mode,
        module.rollout_cfg.sampler_dtype, o.update_dropout,
    )  # fmt: skip
    state.start(torch.device("cpu"), module.seed, rank=0)
    optimizer, schedule = optimizer_and_schedule(trainable_parameters(module.policy), o)
    stepping = Stepping(module, optimizer)
    stepper = rl_step.Stepper(
        stepping, schedule, torch.Tensor.backward, lambda: stepping.checked, lambda: stepping.steps
    )
    stream = iter(PromptStream(module.task, module.rollout_cfg.prompts_per_step, seed=module.seed))
    rows, rollout, extras = [], 0, loss_extras(parts)
    while stepping.steps < typed.trainer.max_steps:
        plan = rl_step.new_rollout(
            parts, next(stream), stepping.steps,
            lambda prompts: rl_step.sample(parts, prompts, state.generators.sampler), state.generators.shuffler,
        )  # fmt: skip
        while not plan.done and stepping.steps < typed.trainer.max_steps:
            step_rows = plan.steps[plan.next_step]
            set_update_mode(module.policy, dropout=False)
            a, b = gradient_pair.gradients(
                module.policy, [loss_a, loss_b], plan, step_rows, plan.rollout.temperature, extras
            )
            mask = plan.rollout.completion_mask[step_rows.to(plan.rollout.input_ids.device)]
            rows.append({"step": stepping.steps, "rollout": rollout} | gradient_pair.compare(a, b, mask))
            set_update_mode(module.policy, dropout=o.update_dropout)
            rl_step.optimizer_step(parts, plan, stepper, state.nonfinite)
        rollout += 1
    return rows


def summary(rows: list[dict[str, float]]) -> str:
    """The mean, min and max of each comparison column, one line each."""
    lines = []
    for column in gradient_pair.COLUMNS:
        values = [r[column] for r in rows if r[column] == r[column]]  # NaN: a zero gradient
        if values:
            lines.append(
                f"{column:28s} mean {statistics.fmean(values):9.4g}  min {min(values):9.4g}  "
                f"max {max(values):9.4g}  ({len(values)} steps)"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--against", required=True, help='loss b\'s overrides, e.g. "loss=cispo loss.eps_high=5"'
    )
    parser.add_argument("--out", type=Path, default=None, help="the per-step CSV (default: none)")
    parser.add_argument("overrides", nargs="*", help="the run's Hydra overrides (its loss is loss a)")
    args = parser.parse_args(argv)
    try:
        rows = compare_along_run(args.overrides, shlex.split(args.against))
    except UserError as exc:
        print(f"diagnose.gradients: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if args.out is not None:
        with open(args.out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    print(summary(rows))


if __name__ == "__main__":
    main()
