"""run.json records what produced a run (`tracking.provenance`), and the warm-start key covers its code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from twinkle_exp.tracking import provenance
from twinkle_exp.tracking.run_json import PROVENANCE, PROVENANCE_KEYS
from twinkle_exp.training import warmup_cache


def test_a_run_records_its_commit_versions_threads_machine_and_what_its_seed_fixes(run_cli, tmp_path):
    proc = run_cli("debug=fast", "seed=3", "trainer.max_steps=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_json,) = tmp_path.glob("outputs/*/*/run.json")
    recorded = json.loads(run_json.read_text())[PROVENANCE]
    commit, dirty = provenance.git_state()
    assert (recorded["commit"], recorded["dirty"]) == (commit, dirty)
    assert recorded["versions"]["torch"] == torch.__version__
    assert recorded["versions"]["lightning"] and recorded["versions"]["twinkle_exp"]
    assert recorded["threads"]["OMP_NUM_THREADS"] == "1"  # run_cli's environment sets it
    assert recorded["threads"]["torch"] >= 1
    assert recorded["accelerator"] == "cpu"
    assert recorded["cpu"] == provenance.cpu_model() and recorded["blas"] == provenance.blas()
    assert len(recorded["reference_digest"]) == 64
    assert len(recorded["warm_start_key"]) == 16
    assert recorded["seed_fixes"] == {"prompt_stream": 3, "sampler_stream": 3, "warm_start": "warmup.seed=0"}
    assert set(PROVENANCE_KEYS) <= set(recorded)


@pytest.fixture
def package_copy(tmp_path, monkeypatch) -> Path:
    """A copy of the package's source, which `warmup_cache` digests instead of the real one."""
    copy = tmp_path / "twinkle_exp"
    shutil.copytree(warmup_cache._PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(warmup_cache, "_PACKAGE", copy)
    return copy


@pytest.mark.parametrize("edited", ["training/warmup.py", "models/tiny_lm.py", "tasks/__init__.py"])
def test_the_warm_start_code_digest_moves_with_the_code_that_builds_it(package_copy, edited):
    before = warmup_cache.code_digest()
    with open(package_copy / edited, "a") as f:
        f.write("\n# edited\n")
    assert warmup_cache.code_digest() != before


def test_the_warm_start_code_digest_ignores_code_the_warm_start_does_not_run(package_copy):
    before = warmup_cache.code_digest()
    with open(package_copy / "report" / "pipeline.py", "a") as f:
        f.write("\n# edited\n")
    assert warmup_cache.code_digest() == before
