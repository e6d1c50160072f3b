"""The end-of-run summary on the terminal: accuracy before and after, and where everything was written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import WandbLogger
from rich.console import Console
from rich.table import Table


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def print_summary(result: dict[str, Any], loss_fn: Any, loggers: list[Any], smoke_run: bool = False) -> None:
    """A two-column table that fits 80 columns: long values (paths, the loss) wrap, whole, onto more lines."""
    table = Table(title="twinkle_exp run", show_header=False, title_justify="left")
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    before, after = result["accuracy_before"], result["accuracy_after"]
    table.add_row("loss", repr(loss_fn))
    table.add_row("greedy val accuracy", f"{before:.1%} (warm-start) -> {after:.1%} ({after - before:+.1%})")
    before_by, after_by = result.get("accuracy_by_length_before"), result.get("accuracy_by_length_after")
    if before_by and after_by:
        table.add_row(
            "by answer length",
            ", ".join(f"{n}: {before_by[n]:.0%} -> {after_by[n]:.0%}" for n in after_by),
        )
    steps = _plural(result["steps"], "optimizer step")
    table.add_row("steps", f"{steps} from {_plural(result['rollouts'], 'rollout')}")
    if smoke_run:
        table.add_row("note", "a smoke run (debug=...): too short for the accuracy to move")
    table.add_row("wall time", f"{result['wall_time_s']:.0f} s")
    table.add_row("output dir", result["output_dir"])
    table.add_row("metrics (CSV)", result["metrics_csv"])
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            run_dir = Path(logger.experiment.dir).parent  # wandb's files/ sits inside the run's directory
            table.add_row("wandb run", str(run_dir))
            table.add_row("upload later", f"wandb sync {run_dir}")
    if result["checkpoint"]:
        table.add_row("checkpoint", result["checkpoint"])
    Console().print(table)
