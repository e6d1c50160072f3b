"""Trackio, a dashboard served on the machine itself: the run's metrics, config, samples and summary, locally.

Trackio (`pip install 'twinkle_exp[trackio]'`) keeps each project's runs in one SQLite file under
`TRACKIO_DIR` (default `~/.cache/huggingface/trackio`; trackio reads it once, at its import);
`trackio show --project twinkle_exp` serves the dashboard. Each job is one Trackio run, grouped by sweep the
way the wandb runs are, with the metric keys of metrics.csv and wandb.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.loggers import Logger
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

from twinkle_exp.errors import UserError
from twinkle_exp.tracking.fail_safe import FailSafe, guarded

INSTALL = "pip install 'twinkle_exp[trackio]'"


def run_name(job_name: str, run_id: str | None) -> str:
    """The job's name, made unique by its run id (`run.json`'s `wandb_id`): the same overrides recur in every
    sweep of a project, and Trackio tells runs apart by name."""
    return job_name if run_id is None else f"{job_name} ({run_id})"


def existing_run(project: str, run_id: str) -> str | None:
    """The name of the project's run with this id, if an earlier attempt made one: a resumed run may differ
    in its overrides (`trainer.max_steps=800` to extend it), so it is found by id, not by its name now."""
    import trackio

    try:
        names = [run.name for run in trackio.Api().runs(project)]
    except ValueError:  # no such project yet
        return None
    return next((name for name in names if name.endswith(f" ({run_id})")), None)


def require_trackio() -> None:
    """Refuse the run (one line, exit 2) when the trackio package is missing, before anything trains."""
    try:
        import trackio  # noqa: F401
    except ImportError as exc:
        raise UserError(f"logger.trackio=true needs the trackio package ({exc}): {INSTALL}") from None


class TrackioLogger(FailSafe, Logger):
    """One Trackio run, started by `start()` on global rank 0, finished by `log_summary` (or, for a run that
    stopped early, by trackio itself when the process exits or the next job of a sweep starts its run)."""

    tool = "trackio"

    def __init__(
        self, project: str, job_name: str, run_id: str | None, group: str | None, config: dict[str, Any]
    ):
        super().__init__()
        self._init = {
            "project": project,
            "name": run_name(job_name, run_id),
            "group": group,
            "config": config,
        }
        self._run_id = run_id
        self._run: Any = None
        self.last_step = 0

    @property
    def name(self) -> str:
        return self._init["project"]

    @property
    def version(self) -> str:
        return self._init["name"]

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        if self._run is None:
            import trackio

            earlier = self._run_id and existing_run(self._init["project"], self._run_id)
            if earlier:  # every attempt of a run writes to one Trackio run, under its first name
                self._init["name"] = earlier
            self._run = trackio.init(**self._init, resume="allow" if earlier else "never")
        return self._run

    @guarded
    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.experiment.log(dict(metrics), step=step)
        if step is not None:
            self.last_step = max(self.last_step, step)

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass  # the resolved config went to trackio.init, whole; Lightning's hparams would be a part of it

    @guarded
    @rank_zero_only
    def log_table(self, key: str, columns: list[str], data: list[list[Any]], step: int) -> None:
        import trackio

        self.experiment.log({key: trackio.Table(columns=columns, data=data)}, step=step)

    @guarded
    @rank_zero_only
    def log_summary(self, figures: dict[str, Any]) -> None:
        """The end-of-run figures (the wandb run summary's keys) at the last step, then the run's end."""
        values = {k: ", ".join(v) if isinstance(v, list) else v for k, v in figures.items() if v is not None}
        self.experiment.log(values, step=self.last_step)
        self._finish()

    def finalize(self, status: str) -> None:
        pass  # Lightning calls this when fit ends; the final validation and the summary are logged after it

    def _finish(self) -> None:
        from trackio import context_vars

        self._run.finish()
        if context_vars.current_run.get() is self._run:
            context_vars.current_run.set(None)  # else trackio finishes it once more at exit, saying so again
