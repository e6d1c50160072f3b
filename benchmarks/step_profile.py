"""Where a rollout of the step benchmark goes: the time inside torch's operators against the wall time.

    python -m benchmarks.step_profile [--case tiny|hf] [--variant default|fused_adamw|compile]
        [--rollouts 22] [--top 15]

One fit of `benchmarks.step`'s setting in this process: after the two warm-up rollouts (as in the
benchmark), half of the rest run plain and are timed, the other half run under `torch.profiler`, and one
last rollout, untimed, holds the fit's final validation. It prints
the wall seconds per plain rollout and per profiled one (the difference is the profiler's own cost), the
seconds per rollout that torch's operators spent in their own code ("aten" self time: the kernels and
their dispatch, which still carries some of the profiler's cost), that as a share of the plain rollout's
wall time, and the operators with the most self time. Both halves run in the same process, which matters
on a shared machine where whole processes run faster or slower than others. With `OMP_NUM_THREADS=1` this
is one core's time, as in the benchmark.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict

from benchmarks import step


def _callback(plain: int, profiled: int, report):
    import lightning as L
    from torch.profiler import ProfilerActivity, profile

    first, switch = step.WARMUP_ROLLOUTS, step.WARMUP_ROLLOUTS + plain

    class Profiled(L.Callback):
        """Times rollouts `first`.. `switch - 1` plain and profiles the rest (a rollout is a training batch)."""

        def __init__(self):
            self.prof, self.start, self.plain_wall = None, 0.0, 0.0

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if batch_idx == first:
                self.start = time.perf_counter()
            if batch_idx == switch:
                self.plain_wall = time.perf_counter() - self.start
                self.prof = profile(activities=[ProfilerActivity.CPU])
                self.prof.__enter__()
                self.start = time.perf_counter()
            if (
                batch_idx == switch + profiled
            ):  # the unmeasured last rollout, which holds the final validation
                wall = time.perf_counter() - self.start
                self.prof.__exit__(None, None, None)
                report(self.prof, self.plain_wall / plain, wall / profiled, profiled)

    return Profiled()


def _report(prof, plain: float, profiled: float, rollouts: int, top: int) -> None:
    """`plain` and `profiled`: wall seconds per rollout without and with the profiler."""
    self_us = defaultdict(float)
    calls = defaultdict(int)
    for event in prof.key_averages():
        if event.key.startswith("aten::"):
            self_us[event.key] += event.self_cpu_time_total
            calls[event.key] += event.count
    aten = sum(self_us.values()) / 1e6 / rollouts  # seconds per rollout
    print(f"rollouts: {rollouts} plain, then {rollouts} profiled")
    print(f"wall per plain rollout:       {plain:.4f} s")
    print(
        f"wall per profiled rollout:    {profiled:.4f} s (the profiler's own cost: {profiled - plain:.4f} s)"
    )
    print(f"torch operators' self time:   {aten:.4f} s per rollout ({aten / plain:.0%} of a plain rollout)")
    print(f"the rest of a plain rollout (Python, autograd's engine, Lightning): {max(plain - aten, 0):.4f} s")
    print(f"{'operator':<52} {'ms/rollout':>10} {'of plain':>8} {'calls/rollout':>13}")
    for key in sorted(self_us, key=self_us.get, reverse=True)[:top]:
        seconds = self_us[key] / 1e6 / rollouts
        print(f"{key[:52]:<52} {seconds * 1e3:>10.2f} {seconds / plain:>8.1%} {calls[key] / rollouts:>13.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=step.CASES, default="tiny")
    parser.add_argument("--variant", choices=step.VARIANTS, default="default")
    parser.add_argument("--rollouts", type=int, default=22)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    if args.rollouts < step.WARMUP_ROLLOUTS + 2:
        parser.error(
            f"--rollouts must be at least {step.WARMUP_ROLLOUTS + 2}: the warm-up, then one plain, one profiled"
        )
    half = (args.rollouts - step.WARMUP_ROLLOUTS) // 2
    callback = _callback(half, half, lambda *figures: _report(*figures, args.top))
    # Only whole halves run (an odd rollout left over is not run), and one more at the end that neither half
    # times: the fit's final validation runs inside its last training step.
    args.rollouts = step.WARMUP_ROLLOUTS + 2 * half + 1
    with tempfile.TemporaryDirectory() as out:
        step._worker(args.case, args.rollouts, out, args.variant, callbacks=[callback])


if __name__ == "__main__":
    main()
