"""The run's `.hydra/` record written by the project (tracking.hydra_record), run.json's identity of it, and the
report's check of one against the other (issue 48). Fast: no training, files written by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from twinkle_exp.report.loading.runs import load_run
from twinkle_exp.tracking import atomic_file, hydra_record
from twinkle_exp.tracking.run_json import IDENTITY

CHOICES = {"loss": "grpo", "task": "reverse_aligned"}


def _record(loss: str = "grpo", overrides: tuple[str, ...] = ("debug=fast",)) -> dict[str, bytes]:
    hydra = {"hydra": {"runtime": {"choices": {"loss": loss, "task": "reverse_aligned", "hydra/help": "x"}}}}
    return {
        hydra_record.CONFIG: yaml.safe_dump({"seed": 0, "loss": {"name": loss}}).encode(),
        hydra_record.HYDRA: yaml.safe_dump(hydra).encode(),
        hydra_record.OVERRIDES: yaml.safe_dump(list(overrides)).encode(),
    }


def _finished_run(run: Path, record: dict[str, bytes], identity: dict | None) -> None:
    """A finished run as the trainer leaves it: run.json, metrics.csv and `.hydra/`."""
    hydra_record.write_record(run, record)
    info = {"status": "finished", "overrides": ["debug=fast"], "loss": "grpo", "seed": 0}
    if identity is not None:
        info[IDENTITY] = identity
    (run / "run.json").write_text(json.dumps(info))
    (run / "metrics.csv").write_text("step,val/accuracy\n1,0.5\n")


def test_replace_bytes_writes_only_changed_files_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "a" / "config.yaml"
    assert atomic_file.replace_bytes(target, b"one\n")
    stamp = target.stat().st_mtime_ns, target.stat().st_ino
    assert not atomic_file.replace_bytes(target, b"one\n")  # same bytes: not even opened for writing
    assert (target.stat().st_mtime_ns, target.stat().st_ino) == stamp
    assert atomic_file.replace_bytes(target, b"two\n")
    assert target.read_bytes() == b"two\n"
    assert sorted(os.listdir(target.parent)) == ["config.yaml"]


def test_identity_names_the_config_digest_overrides_and_choices():
    record = _record()
    identity = hydra_record.identity(record, CHOICES)
    assert identity["overrides"] == ["debug=fast"]
    assert identity["choices"] == CHOICES
    assert identity["config_sha256"] == hydra_record.config_digest(record[hydra_record.CONFIG])


def test_a_record_that_agrees_with_run_json_loads_without_a_problem(tmp_path):
    record = _record()
    _finished_run(tmp_path, record, hydra_record.identity(record, CHOICES))
    assert hydra_record.record_differences(tmp_path, hydra_record.identity(record, CHOICES)) == []
    run = load_run(tmp_path, tmp_path)
    assert run.problems == []
    assert run.choices["loss"] == "grpo" and run.config["loss"]["name"] == "grpo"


@pytest.mark.parametrize("damage", ["another experiment's record", "emptied config.yaml", "no .hydra"])
def test_the_report_flags_a_record_run_json_disagrees_with_and_labels_by_run_json(tmp_path, damage):
    """The mislabelling of issue 48: a finished GRPO run whose `.hydra/` describes `loss=sapo` (a refused start
    killed before it put the files back), or whose config.yaml a kill emptied."""
    record = _record()
    _finished_run(tmp_path, record, hydra_record.identity(record, CHOICES))
    if damage == "another experiment's record":
        hydra_record.write_record(tmp_path, _record("sapo", ("debug=fast", "loss=sapo")))
    elif damage == "emptied config.yaml":
        (tmp_path / ".hydra" / "config.yaml").write_bytes(b"")
    else:
        for path in (tmp_path / ".hydra").iterdir():
            path.unlink()
    run = load_run(tmp_path, tmp_path)
    [problem] = run.problems
    assert "run.json and .hydra/ disagree" in problem and "labelled by run.json" in problem
    assert run.choices == CHOICES  # run.json's labels, not sapo's
    assert run.config == {}  # config values from a record that disagrees are not used
    assert run.variant == "debug=fast"


def test_a_run_written_before_the_identity_keeps_its_hydra_record(tmp_path):
    """run.json without `identity` (written before issue 48): `.hydra/` is read as before, nothing flagged."""
    _finished_run(tmp_path, _record("sapo"), identity=None)
    run = load_run(tmp_path, tmp_path)
    assert run.problems == []
    assert run.choices["loss"] == "sapo" and run.config["loss"]["name"] == "sapo"
