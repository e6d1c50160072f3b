"""A finished run built in memory for the report's tests: a label, a seed and its metrics, no files."""

from __future__ import annotations

from pathlib import Path

from twinkle_exp.report.loading.runs import Run


def finished_run(label: str, seed: int, metrics: dict, config: dict | None = None) -> Run:
    """The run `label` of `seed` (its overrides: the label and `seed=`), with `metrics` and `config`."""
    kwargs = {} if config is None else {"config": config}
    return Run(
        Path(f"/x/{label}/{seed}"), f"{label}/{seed}", [label, f"seed={seed}"], "finished", seed=seed,
        metrics=metrics, **kwargs,
    )  # fmt: skip
