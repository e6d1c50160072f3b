"""Each job's status and attempts: a resumed job (pre-empted, interrupted, requeued) has run more than once.

Read from each job's run.json (`attempts`, written by the trainer, loaded with the run), so an interrupted
sweep shows which jobs finished, which stopped where, and how often each was resumed; rerunning the sweep
command with the same `hydra.sweep.dir` skips the finished jobs and resumes the others.
"""

from __future__ import annotations

from ..loading.runs import Run

HEADERS = ["job", "status", "attempts", "last step"]


def attempt_rows(runs: list[Run]) -> list[list[str]]:
    """One row per job: name, status, number of attempts, the optimizer step it last reached."""
    rows = []
    for run in runs:
        info = run.run_json
        attempts = info.get("attempts")
        count = len(attempts) if isinstance(attempts, list) else (1 if info else 0)
        final = info.get("final") if isinstance(info.get("final"), dict) else {}
        step = final.get("steps", info.get("step"))  # "step": where an interrupted or failed run stopped
        rows.append([run.name, run.status, str(count), "–" if step is None else str(step)])
    return rows


def render_attempts_markdown(runs: list[Run]) -> str:
    """A "Jobs and attempts" section for report.md (a list: the job table above is keyed by job name)."""
    lines = ["", "## Jobs and attempts", ""]
    for name, status, count, step in attempt_rows(runs):
        attempts = f"{count} attempt{'s' if count != '1' else ''}"
        lines.append(f"- `{name}`: {status}, {attempts}, last step {step}")
    return "\n".join(lines) + "\n"
