"""Refactors keep behaviour: seed-0 metrics.csv of `debug=fast` for every loss, and of the default run, equal
the rows recorded at 2d44b2d (tests/fixtures/behaviour/), value for value.

Floats move with the CPU's instruction set and the thread count, so the comparison holds on the machine kind
the fixtures were recorded on (`machine.json`: CPU model, ISA flags, torch) at one thread, and is skipped,
saying so, elsewhere; a fixture added later on another machine kind carries its own record
(`fast_<loss>.machine.json`, written by `python tests/behaviour_fixtures.py <loss>`). A change that is meant to alter a run's figures re-records them:
`python tests/behaviour_fixtures.py` (and says why in its commit).
"""

from __future__ import annotations

import pytest
from behaviour_fixtures import FIXTURES, LOSSES, fast_overrides, fixture_rows, machine_mismatch, run_rows

pytestmark = pytest.mark.slow


def skip_unless_recorded_here(name: str) -> None:
    why = machine_mismatch(name)
    if why:
        pytest.skip(f"{name} recorded on another machine kind ({why}): floats would differ")


def test_every_registered_loss_has_a_fixture():
    assert {p.stem.removeprefix("fast_") for p in FIXTURES.glob("fast_*.csv")} == set(LOSSES)


@pytest.mark.parametrize("loss", LOSSES)
def test_debug_fast_metrics_are_unchanged(loss, tmp_path, cli_env):
    skip_unless_recorded_here(f"fast_{loss}.csv")
    assert run_rows(fast_overrides(loss), tmp_path, cli_env) == fixture_rows(f"fast_{loss}.csv")


def test_default_run_metrics_are_unchanged(tmp_path, cli_env):
    skip_unless_recorded_here("default.csv")
    rows = run_rows(["trainer.enable_progress_bar=false"], tmp_path, cli_env, timeout=900)
    assert rows == fixture_rows("default.csv")
