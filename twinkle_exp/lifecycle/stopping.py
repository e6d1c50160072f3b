"""A run that stopped before `trainer.max_steps`: say why, how to resume it, and exit non-zero.

A signal ends as "interrupted" (exit 128 + the signal's number, 143 for SIGTERM; under SLURM, SIGUSR1
requeues the job instead, and submitit's SIGUSR2 goes on to submitit); non-finite values end as "failed"
(a `NonFiniteError`). Either way the checkpoint is written first and `run.json` names it.
"""

from __future__ import annotations

import logging
import re
import shlex
import sys
from pathlib import Path

from lightning.fabric.utilities.rank_zero import rank_zero_only

from twinkle_exp.lifecycle import signals
from twinkle_exp.lifecycle.nonfinite import NonFiniteError
from twinkle_exp.tracking.run_json import JobInfo, RunStatus

log = logging.getLogger(__name__)


_PLAIN = re.compile(r"[\w./:+-]*")  # characters neither Hydra nor the shell treat specially


def _hydra_quoted(value: str) -> str:
    # Hydra reads `a,b` as a sweep and a second `=` as a syntax error: a quoted string is taken literally.
    if _PLAIN.fullmatch(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _shell_quoted(arg: str) -> str:
    if _PLAIN.fullmatch(arg.replace("=", "")):
        return arg
    if not re.search(r'["$`\\!]', arg):
        return f'"{arg}"'  # reads better than shlex's '"'"' when the argument holds Hydra's single quotes
    return shlex.quote(arg)


def resume_command(job: JobInfo, argv: list[str] | None = None) -> str:
    """The command that continues this run: the sweep again in its directory, or this run in its own."""
    argv = sys.argv[1:] if argv is None else argv
    if job.multirun and job.sweep_dir and ({"-m", "--multirun"} & set(argv)):
        args = [a for a in argv if not a.startswith("hydra.sweep.dir=")]
        args.append(f"hydra.sweep.dir={_hydra_quoted(str(job.sweep_dir))}")
    else:
        args = [a for a in job.task_overrides if not a.startswith(("hydra.run.dir=", "resume="))]
        args.append(f"hydra.run.dir={_hydra_quoted(str(job.output_dir))}")
    return " ".join(["python -m twinkle_exp", *(_shell_quoted(a) for a in args)])


def end_stopped_run(
    status: RunStatus,
    job: JobInfo,
    signum: int | None,
    step: int,
    checkpoint: Path | None,
    is_slurm: bool,
    reason: str = "",
) -> None:
    """Record and announce a run stopped at optimizer `step` by `signum` (None: non-finite values, `reason`
    says which), then raise what ends the process."""
    where = (
        f"checkpoint {checkpoint}" if checkpoint else "no checkpoint yet: a resume starts from the beginning"
    )
    if signum is None:
        message = f"{reason}; {where}"
        status.finish(
            "failed", error=f"NonFiniteError: {message}", checkpoint=checkpoint and str(checkpoint), step=step
        )
        raise NonFiniteError(message)
    command = resume_command(job)
    # One requeue per job: global rank 0's (the other ranks end with it).
    requeued = rank_zero_only.rank == 0 and signals.requeue_on_slurm(signum, is_slurm)
    status.finish(
        "interrupted",
        error=f"{signals.name(signum)} at optimizer step {step}",
        checkpoint=checkpoint and str(checkpoint),
        resume_command=command,
        requeued=requeued,
        step=step,
    )
    then = "SLURM requeued the job; it resumes by itself" if requeued else f"resume with:\n  {command}"
    message = f"twinkle_exp: interrupted by {signals.name(signum)} at optimizer step {step}; {where}; {then}"
    log.warning(message)
    print(message, file=sys.stderr, flush=True)
    signals.hand_over(signum)  # submitit's handler requeues and exits here
    raise SystemExit(signals.exit_code(signum))
