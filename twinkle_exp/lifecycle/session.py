"""`RunSession`: one run's start checks, its status in run.json, and every way it ends, in one place.

A run ends in one of four ways, and each is written here once:
- refused: a `UserError` before training started. Nothing ran, so the run directory goes back to exactly
  what it was (`run_dir_guard`) and run.json is not touched;
- finished: `finish` records the final figures;
- interrupted: a signal, recorded with the step, the checkpoint and the command that resumes it
  (`stop_if_asked`), then the process exits 128 + the signal;
- failed: anything else, or too many non-finite steps in a row.
`run.train` builds, warm-starts and fits inside `with session.running():`, which turns an exception into
the right one of these.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.rank_zero import rank_zero_only

from twinkle_exp.errors import UserError
from twinkle_exp.lifecycle import previous_run, resume, run_dir_guard, run_lock, signals
from twinkle_exp.lifecycle.checkpoints import last_checkpoint
from twinkle_exp.lifecycle.run_end import RunEnd
from twinkle_exp.lifecycle.stopping import end_stopped_run
from twinkle_exp.tracking import hydra_record
from twinkle_exp.tracking.run_json import PROVENANCE, JobInfo, RunStatus, read_run_json

log = logging.getLogger(__name__)


class RunSession:
    """The run in `job.output_dir`: where it starts (`start`), where it ends (`end`: `max_steps` optimizer
    steps, or a stop), and its run.json status once it has one."""

    def __init__(
        self,
        job: JobInfo,
        resume_setting: str | None,
        config: dict[str, Any],
        seed: int,
        max_steps: int,
        record: dict[str, bytes] | None = None,
    ):
        self.job = job
        self.record = record  # the `.hydra/` files' bytes (tracking.hydra_record), None outside Hydra
        self.seed = seed
        self.end = RunEnd(max_steps)
        self.is_slurm = SLURMEnvironment.detect()
        self.status: RunStatus | None = None
        self.fitting = False  # once training started, a UserError is a failure, not a refusal
        run_lock.hold(job.output_dir)  # one process per directory (a single run's: held since Hydra started)
        # A start refused with a UserError before training puts back every file of the run directory.
        self._before = run_dir_guard.snapshot(job.output_dir)
        with self._restored_if_refused():
            # An ended run there is continued, else refused or moved aside: never overwritten.
            self.start, self._before = previous_run.start_in(
                job.output_dir, resume_setting, config.get("previous_run", "refuse"), config, self._before
            )
            # Before "nothing to do": another loss is another run.
            resume.check_resume_config(self.start, config)

    @property
    def resumed_from(self) -> str | None:
        return self.start.checkpoint and str(self.start.checkpoint)

    @contextlib.contextmanager
    def _restored_if_refused(self) -> Iterator[None]:
        try:
            yield
        except UserError:
            self._before.restore()
            raise

    def finished_before(self) -> dict[str, Any] | None:
        """The recorded figures when this directory already finished what is asked (then it is left as it
        was: Hydra's files would describe a config that did not run), else None."""
        previous = read_run_json(self.job.output_dir / "run.json")
        own = self.start.checkpoint == last_checkpoint(self.job.output_dir)
        if previous.get("status") == "finished" and own and self.end.done(self.start.step):
            self._before.restore()
            log.warning(
                "%s finished already (%d optimizer steps): nothing to do",
                self.job.output_dir,
                self.start.step,
            )
            return previous.get("final")
        return None

    def begin(self, write: bool, wandb_id: str) -> None:
        """The run's `.hydra/` record, then run.json saying "running" with the record's identity, from here on
        (`write`: this process is global rank 0). The first writes of the run's own record: every start that
        ends before this (refused, nothing to do) leaves the record as it was."""
        identity = None
        if self.record is not None:
            identity = hydra_record.identity(self.record, self.job.choices)
            if write:
                hydra_record.write_record(self.job.output_dir, self.record)
        self.status = RunStatus(
            self.job,
            self.seed,
            self.resumed_from,
            self.start.step,
            write=write,
            wandb_id=wandb_id,
            identity=identity,
        )

    def stop_if_asked(self, step: int, checkpoint: Path | None) -> None:
        """Record a run asked to stop (`end`: a signal, or too many non-finite steps) at optimizer `step`
        with `checkpoint` as the one to resume from, and exit."""
        assert self.status is not None, "begin() first"
        if self.end.signalled():
            end_stopped_run(
                self.status, self.job, self.end.signal, step, checkpoint, self.is_slurm, self.end.reason
            )

    def record_provenance(self, provenance: dict[str, Any]) -> None:
        """run.json records what produced the run (`tracking.provenance`), before training starts."""
        assert self.status is not None, "begin() first"
        self.status.record(**{PROVENANCE: provenance})

    def finish(self, final: dict[str, Any]) -> None:
        assert self.status is not None, "begin() first"
        self.status.finish("finished", final=final)

    @contextlib.contextmanager
    def running(self, loggers: list[Any]) -> Iterator[None]:
        """Around everything from the start checks to the summary: an exception ends the run as refused,
        interrupted or failed; the signal handlers and wandb are closed whatever happens."""
        refused = False
        try:
            yield
        except BaseException as exc:
            refused = isinstance(exc, UserError) and not self.fitting
            if not refused:
                self._record_ending(exc)
            raise
        finally:
            signals.restore()
            _finish_wandb(loggers)
            if refused:  # nothing ran: the run directory goes back to what it was, after wandb closed
                self._before.restore()

    def _record_ending(self, exc: BaseException) -> None:
        # Before the trainer knows the rank, Lightning's guess from the launcher's environment decides.
        if self.status is None:
            self.begin(write=rank_zero_only.rank == 0, wandb_id=None)
        if self.status.data["status"] == "running":  # a stop has recorded its own ending
            ended = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            self.status.finish(ended, error=f"{type(exc).__name__}: {exc}")


def _finish_wandb(loggers: list[Any]) -> None:
    from lightning.pytorch.loggers import WandbLogger

    if not any(isinstance(logger, WandbLogger) for logger in loggers):
        return
    import wandb

    try:
        wandb.finish()
    except Exception as exc:  # the run's outcome is already recorded; wandb's failure is not it
        log.warning("wandb.finish failed: %s", exc)
