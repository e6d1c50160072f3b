"""`python -m twinkle_exp [overrides]`: the Hydra entry point.

A bad setting ends here, before Lightning is imported: every problem on a line of its own, exit status 2,
no traceback (set HYDRA_FULL_ERROR=1 for one).
"""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig

from twinkle_exp.config.checks import check_config, override_problems
from twinkle_exp.config.checks.hydra_messages import condense
from twinkle_exp.config.store import register_configs
from twinkle_exp.errors import UserError
from twinkle_exp.lifecycle import run_dir_guard, signals
from twinkle_exp.parallel.launcher_env import rank_hydra_overrides

register_configs()
USAGE_ERROR = 2
_started = False  # whether Hydra composed the config and called the task function


class _HeldStderr:
    """stderr while Hydra composes the config: what it prints is held, so that a composition error (an
    unknown key, a value of the wrong type) becomes one line; once the task function runs, the held text
    goes out as it was and every later write passes straight through (a log handler made meanwhile keeps
    this object as its stream)."""

    def __init__(self, real):
        self.real, self.held = real, []

    def write(self, text: str) -> int:
        if self.held is None:
            return self.real.write(text)
        self.held.append(text)
        return len(text)

    def release(self) -> str:
        text, self.held = "".join(self.held or []), None
        return text

    def __getattr__(self, name: str):  # flush, fileno, isatty, encoding: the real stream's
        return getattr(self.real, name)


_stderr: _HeldStderr | None = None


def _refuse(problems: list[str]) -> None:
    print(f"twinkle_exp: {len(problems)} problem(s) in the config:", file=sys.stderr)
    for line in problems:
        print(f"  {line}", file=sys.stderr)
    sys.exit(USAGE_ERROR)


@hydra.main(config_path="pkg://twinkle_exp.conf", config_name="config", version_base="1.3")
def _main(cfg: DictConfig) -> float:
    global _started
    _started = True
    sys.stderr.write(_release_stderr())  # what Hydra printed while composing, as it was
    from hydra.core.hydra_config import HydraConfig

    try:
        typed = check_config(cfg)
    except ValueError as exc:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        run_dir_guard.restore_taken(HydraConfig.get().runtime.output_dir)  # Hydra's files, as they were
        _refuse(str(exc).splitlines())

    print(
        f"twinkle_exp: {cfg.loss._target_.rsplit('.', 1)[-1]} on {cfg.task._target_.rsplit('.', 1)[-1]}, "
        f"{cfg.trainer.max_steps} optimizer steps -> {HydraConfig.get().runtime.output_dir}",
        flush=True,
    )
    # Before the slow imports: a signal from here on stops the run cleanly, with run.json saying so.
    signals.install()
    try:
        from twinkle_exp.run import train  # heavy imports (Lightning) after the config is known to be good

        # The return value is what Hydra's Optuna sweeper maximises.
        return train(cfg, typed)["accuracy_after"]
    except (
        UserError
    ) as exc:  # run.json has the same line, or (refused at start-up) the directory is as it was
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"twinkle_exp: {exc}", file=sys.stderr)
        sys.exit(USAGE_ERROR)
    finally:
        signals.restore()  # whatever happened: the next job of a sweep, or the shell, gets them back


def _release_stderr() -> str:
    """Give stderr back; returns the text held meanwhile (empty when nothing was held)."""
    global _stderr
    if _stderr is None:
        return ""
    sys.stderr, held, _stderr = _stderr.real, _stderr.release(), None
    return held


def main() -> None:
    global _stderr
    sys.argv += rank_hydra_overrides()  # torchrun/srun ranks > 0 share rank 0's directory quietly
    problems = override_problems(sys.argv[1:])
    if problems:
        _refuse(problems)
    if os.environ.get("HYDRA_FULL_ERROR") != "1":
        _stderr = sys.stderr = _HeldStderr(sys.stderr)
    try:
        _main()
    except SystemExit as exc:
        held = _release_stderr() if not _started else ""
        # Hydra exits 1 for a config it could not compose (a wrong type, an unknown key): a usage error too,
        # in one line like every other refusal.
        if exc.code == 1 and not _started:
            _refuse([condense(held)])
        sys.stderr.write(held)
        raise
    except KeyboardInterrupt:
        print("twinkle_exp: interrupted", file=sys.stderr)
        sys.exit(130)
    finally:
        sys.stderr.write(_release_stderr())


if __name__ == "__main__":
    main()
