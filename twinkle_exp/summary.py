"""The end-of-run summary on the terminal: accuracy before and after, and where everything was written."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.loggers import WandbLogger
from rich.console import Console
from rich.table import Table


def print_summary(result: dict[str, Any], loss_fn: Any, loggers: list[Any]) -> None:
    table = Table(title="twinkle_exp run", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    before, after = result["accuracy_before"], result["accuracy_after"]
    table.add_row("loss", repr(loss_fn))
    table.add_row("greedy val accuracy", f"{before:.1%} (warm-start) -> {after:.1%} ({after - before:+.1%})")
    table.add_row("steps", f"{result['steps']} optimizer steps from {result['rollouts']} rollouts")
    table.add_row("wall time", f"{result['wall_time_s']:.0f} s")
    table.add_row("output dir", result["output_dir"])
    table.add_row("metrics (CSV)", result["metrics_csv"])
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            table.add_row("wandb run", f"{logger.experiment.dir}  (upload later: wandb sync)")
    if result["checkpoint"]:
        table.add_row("checkpoint", result["checkpoint"])
    Console().print(table)
