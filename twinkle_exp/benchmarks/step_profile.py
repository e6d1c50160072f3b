"""Where a rollout of the step benchmark goes: the time inside torch's operators against the wall time.

    python -m twinkle_exp.benchmarks.step_profile [--case tiny|hf] [--variant default|fused_adamw|compile]
        [--rollouts 12] [--top 15]

One fit of `benchmarks.step`'s setting in this process, under `torch.profiler` from the third rollout on
(the first two are warm-up, as in the benchmark). It prints the wall seconds per profiled rollout, the
seconds per rollout that torch's operators spent in their own code ("aten" self time: the kernels and
their dispatch), the rest (Python, autograd's engine, Lightning, the profiler's own cost), and the
operators with the most self time. The profiler adds its own cost to every operator, so the wall time is
higher than the benchmark's; the shares are what to read. With `OMP_NUM_THREADS=1` this is one core's
time, as in the benchmark.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict

from twinkle_exp.benchmarks import step


def _callback(first: int, report):
    import lightning as L
    from torch.profiler import ProfilerActivity, profile

    class Profiled(L.Callback):
        """Profiles rollouts `first`.. to the end of the fit (a rollout is one training batch)."""

        def __init__(self):
            self.prof, self.start, self.rollouts = None, 0.0, 0

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if batch_idx == first:
                self.prof = profile(activities=[ProfilerActivity.CPU])
                self.prof.__enter__()
                self.start = time.perf_counter()
            if self.prof is not None:
                self.rollouts += 1

        def on_train_end(self, trainer, module):
            if self.prof is not None:
                wall = time.perf_counter() - self.start
                self.prof.__exit__(None, None, None)
                report(self.prof, wall, self.rollouts)

    return Profiled()


def _report(prof, wall: float, rollouts: int, top: int) -> None:
    self_us = defaultdict(float)
    calls = defaultdict(int)
    for event in prof.key_averages():
        if event.key.startswith("aten::"):
            self_us[event.key] += event.self_cpu_time_total
            calls[event.key] += event.count
    aten = sum(self_us.values()) / 1e6
    print(f"profiled rollouts: {rollouts}")
    print(f"wall per rollout:             {wall / rollouts:.4f} s (with the profiler's own cost)")
    print(f"torch operators' self time:   {aten / rollouts:.4f} s per rollout ({aten / wall:.0%} of wall)")
    print(f"the rest (Python, autograd engine, Lightning, profiler): {(wall - aten) / rollouts:.4f} s")
    print(f"{'operator':<52} {'ms/rollout':>10} {'share':>6} {'calls/rollout':>13}")
    for key in sorted(self_us, key=self_us.get, reverse=True)[:top]:
        ms = self_us[key] / 1e3 / rollouts
        print(f"{key[:52]:<52} {ms:>10.2f} {self_us[key] / 1e6 / wall:>6.1%} {calls[key] / rollouts:>13.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=step.CASES, default="tiny")
    parser.add_argument("--variant", choices=step.VARIANTS, default="default")
    parser.add_argument("--rollouts", type=int, default=12)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    if args.rollouts <= step.WARMUP_ROLLOUTS:
        parser.error(f"--rollouts must be more than the {step.WARMUP_ROLLOUTS} warm-up rollouts")
    callback = _callback(step.WARMUP_ROLLOUTS, lambda p, w, n: _report(p, w, n, args.top))
    with tempfile.TemporaryDirectory() as out:
        step._worker(args.case, args.rollouts, out, args.variant, callbacks=[callback])


if __name__ == "__main__":
    main()
