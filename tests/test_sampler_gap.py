"""Top-k / top-p: the start-up warning, and the filtered mass logged with each rollout's metrics."""

import logging

import pytest
import torch
from hydra import compose

from twinkle_exp import metric_names as M
from twinkle_exp.config.checks import check_config
from twinkle_exp.config.store import register_configs
from twinkle_exp.loss.advantages import group_advantages
from twinkle_exp.training.rollout_metrics import RolloutRows, rollout_metrics

register_configs()


pytestmark = pytest.mark.usefixtures("hydra_conf")  # conftest.py: the shipped config tree


@pytest.mark.parametrize("override", ["rollout.top_k=20", "rollout.top_p=0.9"])
def test_a_filter_warns_at_start_up(override, caplog):
    with caplog.at_level(logging.WARNING, logger="twinkle_exp.config.checks"):
        check_config(compose(config_name="config", overrides=[override]))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and override in lines[0] and M.SAMPLER_FILTERED_MASS in lines[0]


def test_no_filter_no_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="twinkle_exp.config.checks"):
        check_config(compose(config_name="config", overrides=["rollout.top_k=0", "rollout.top_p=1.0"]))
    assert not caplog.records


def rows(filtered):
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    return RolloutRows(
        rewards, {"exact": rewards}, torch.tensor([2, 3, 1, 4]), torch.zeros(4, dtype=torch.bool), filtered
    )


SECONDS = {M.TIME_ROLLOUT: 1.0, M.TIME_UPDATE: 1.0}


def test_filtered_mass_is_logged_per_completion_token():
    r = rows(torch.tensor([0.2, 0.3, 0.0, 0.5])).gathered()
    metrics = rollout_metrics(r, group_advantages(r.rewards, 2), SECONDS, epochs=1)
    assert metrics[M.SAMPLER_FILTERED_MASS] == pytest.approx(1.0 / 10)
    assert r.lengths.tolist() == [2, 3, 1, 4] and r.truncated.dtype == torch.bool


def test_without_a_filter_the_key_is_absent():
    r = rows(None).gathered()
    assert M.SAMPLER_FILTERED_MASS not in rollout_metrics(
        r, group_advantages(r.rewards, 2), SECONDS, epochs=1
    )


@pytest.mark.slow
def test_a_top_p_run_warns_and_logs_its_filtered_mass(run_cli, tmp_path):
    from cli_run_helpers import check_ok, metric_rows

    proc = run_cli("rollout.top_p=0.9", "debug=fast")
    check_ok(proc)
    assert "rollout.top_p=0.9" in proc.stdout + proc.stderr
    (run_dir,) = [p.parent for p in tmp_path.glob("outputs/*/*/run.json")]
    values = [float(r[M.SAMPLER_FILTERED_MASS]) for r in metric_rows(run_dir) if M.SAMPLER_FILTERED_MASS in r]
    # top_p=0.9 removes at most 10% of a token's mass (the kept tokens cover at least 0.9)
    assert values and all(0.0 <= v <= 0.1 + 1e-6 for v in values) and max(values) > 0
