"""Under DDP (2 CPU processes): SIGTERM to the launching process stops every rank after the same optimizer
step, global rank 0 writes one checkpoint holding both ranks' states, and the resumed run equals the
uninterrupted one."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import torch
from cli_run_helpers import check_ok, final_weights, metric_rows, run_twinkle, wait_for_step

DDP = ["debug=fast", "logger=csv", "trainer.save_checkpoint=true", "trainer.max_steps=60"]
DDP += ["trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp"]


@pytest.mark.slow
def test_sigterm_under_ddp_stops_every_rank_and_resumes_exactly(tmp_path, cli_env):
    whole, split = tmp_path / "whole", tmp_path / "split"
    check_ok(run_twinkle([*DDP, f"hydra.run.dir={whole}"], tmp_path, cli_env))
    proc = subprocess.Popen(
        [sys.executable, "-m", "twinkle_exp", *DDP, f"hydra.run.dir={split}"],
        cwd=tmp_path,
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_step(split, 10, proc)
    proc.send_signal(signal.SIGTERM)  # to the launching process (global rank 0) only
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    status = json.loads((split / "run.json").read_text())
    assert status["status"] == "interrupted" and len(status["attempts"]) == 1  # one writer
    saved = torch.load(status["checkpoint"], map_location="cpu", weights_only=False)
    assert saved["global_step"] == status["step"] and saved["twinkle_run"]["world_size"] == 2
    assert len(saved["twinkle_module"]["per_rank"]) == 2  # each rank's random states and rollout

    check_ok(run_twinkle([*DDP, f"hydra.run.dir={split}"], tmp_path, cli_env))
    assert metric_rows(split) == metric_rows(whole)
    a, b = final_weights(whole), final_weights(split)
    assert all(torch.equal(a[k], b[k]) for k in a)
