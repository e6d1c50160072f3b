"""`RunEnd`: when a run ends and why, owned in one place.

A run ends at its step budget (`trainer.max_steps`: `done(step)`), or earlier when it is asked to stop: a
signal (SIGTERM, SIGINT, SIGUSR1/2: `lifecycle/signals.py` only records it; it is honoured here, in
`signalled`) or too many non-finite optimizer steps (`stop`). Under data parallelism the ranks vote after
every optimizer step (`vote`), so they all stop after the same step, for the first stopped rank's reason.
`run.train` builds one from the config and gives its budget to Lightning's trainer; a trainer built by
hand (the tests, the benchmarks) gives the module its own (`PolicyModule.setup`).
"""

from __future__ import annotations

from dataclasses import dataclass

from twinkle_exp.lifecycle import signals
from twinkle_exp.parallel import collectives


@dataclass
class RunEnd:
    max_steps: int  # the step budget: optimizer steps of the whole run
    reason: str | None = None  # why the run stops before `max_steps`, when it does
    signal: int | None = None  # the signal behind `reason` (None: non-finite values)

    @classmethod
    def for_trainer(cls, end: RunEnd | None, max_steps: int) -> RunEnd:
        """`end`, which gave Lightning's trainer its `max_steps`, or the budget of a trainer built by hand."""
        if end is None:
            return cls(max_steps)
        if end.max_steps != max_steps:
            raise ValueError(f"the trainer's max_steps={max_steps} is not the run's budget, {end.max_steps}")
        return end

    def done(self, step: int) -> bool:
        """Whether optimizer step `step` has used up the budget: the run's end, whatever else happened."""
        return step >= self.max_steps

    def stop(self, reason: str, signum: int | None = None) -> None:
        """Ask the run to stop after the current optimizer step; the first reason given is the one kept."""
        if self.reason is None:
            self.reason, self.signal = reason, signum

    def signalled(self) -> bool:
        """Whether the run is asked to stop; a signal received since the handlers went in becomes the reason.

        The one place where a signal is honoured: before training, between optimizer steps, after fit.
        """
        signum = signals.received()
        if signum is not None:
            self.stop(f"{signals.name(signum)} received", signum)
        return self.reason is not None

    def vote(self) -> bool:
        """Whether any rank is asked to stop (a collective: every rank calls it after the same step). Every
        rank then takes the first stopped rank's reason, so all of them end the run the same way."""
        if not collectives.any_rank(self.signalled()):
            return False
        votes = collectives.all_gather_object((self.reason, self.signal))
        self.reason, self.signal = next(v for v in votes if v[0] is not None)
        return True
