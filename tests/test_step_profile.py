"""The step profile's arithmetic: torch operators' self time per rollout, against the plain rollout's wall."""

from types import SimpleNamespace

from benchmarks import step_profile


class _Prof:
    def key_averages(self):
        event = SimpleNamespace
        return [
            event(key="aten::mm", self_cpu_time_total=30_000.0, count=20),  # microseconds, over 2 rollouts
            event(key="aten::add", self_cpu_time_total=10_000.0, count=40),
            event(key="Optimizer.step#AdamW.step", self_cpu_time_total=99_000.0, count=2),  # not an operator
        ]


def test_operator_time_is_per_rollout_and_against_the_plain_wall(capsys):
    step_profile._report(_Prof(), plain=0.05, profiled=0.06, rollouts=2, top=5)
    out = capsys.readouterr().out
    assert "torch operators' self time:   0.0200 s per rollout (40% of a plain rollout)" in out
    assert "the profiler's own cost: 0.0100 s" in out
    assert "(Python, autograd's engine, Lightning): 0.0300 s" in out
    mm = next(line for line in out.splitlines() if line.startswith("aten::mm"))
    assert mm.split()[1:] == ["15.00", "30.0%", "10.0"]
    assert "Optimizer.step" not in out
