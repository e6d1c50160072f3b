"""policy=hf with a tiny random Llama and a character-level tokenizer saved locally (never downloaded)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from hf_helpers import CHARS, SPECIALS

from twinkle_exp import metric_names as M
from twinkle_exp.models import HFTokenizerAdapter, encode_prompt
from twinkle_exp.policy.build import Policy, hf_policy


def test_saved_dir_holds_a_matching_model_and_tokenizer(tiny_hf_dir):
    config = json.loads((tiny_hf_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["vocab_size"] == len(SPECIALS) + len(CHARS)
    assert (tiny_hf_dir / "tokenizer.json").exists()


def test_hf_policy_loads_and_round_trips(tiny_hf_dir):
    policy = hf_policy(str(tiny_hf_dir))
    assert isinstance(policy, Policy)
    assert type(policy.model).__name__ == "LlamaForCausalLM"
    tok = policy.tokenizer
    assert isinstance(tok, HFTokenizerAdapter)
    assert tok.vocab_size == policy.model.config.vocab_size
    ids = tok.encode("12+34=")
    assert len(ids) == 6  # one token per character
    assert tok.decode(ids) == "12+34="
    assert tok.decode([tok.bos_token_id, *ids, tok.eos_token_id, tok.pad_token_id]) == "12+34="
    assert len({tok.pad_token_id, tok.bos_token_id, tok.eos_token_id}) == 3
    assert encode_prompt(tok, "12+34=") == [tok.bos_token_id, *ids]
    with torch.no_grad():
        logits = policy.model(torch.tensor([encode_prompt(tok, "12+34=")])).logits
    assert logits.shape == (1, 7, tok.vocab_size)


@pytest.mark.slow
def test_cli_trains_an_hf_policy(tiny_hf_dir, run_cli, tmp_path, twinkle_cache):
    proc = run_cli(
        "policy=hf", f"policy.name_or_path={tiny_hf_dir}", "debug=fast", "trainer.save_checkpoint=true"
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    [status_file] = tmp_path.glob("outputs/*/*/run.json")
    out = status_file.parent
    status = json.loads(status_file.read_text())
    assert status["status"] == "finished", status
    assert status["final"]["steps"] == 4  # debug=fast: trainer.max_steps

    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    losses = [float(r[M.LOSS]) for r in rows if r.get(M.LOSS)]
    grad_norms = [float(r[M.GRAD_NORM]) for r in rows if r.get(M.GRAD_NORM)]
    assert losses and all(math.isfinite(v) for v in losses)
    assert grad_norms and all(v > 0 for v in grad_norms)

    # The checkpoint holds weights that moved away from the warm-start, which moved away from the saved ones.
    checkpoint = Path(status["final"]["checkpoint"])
    trained = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    trained = {k.removeprefix("policy."): v for k, v in trained.items()}
    initial = hf_policy(str(tiny_hf_dir)).model.state_dict()
    assert set(trained) == set(initial)
    warm_starts = [
        torch.load(p, map_location="cpu", weights_only=True) for p in twinkle_cache.glob("warmup-*.pt")
    ]
    [warm] = [w for w in warm_starts if set(w) == set(initial)]  # this Llama's, not the tiny policy's
    assert any(not torch.equal(warm[k], initial[k]) for k in initial), "the warm-start changed nothing"
    changed = [k for k in initial if not torch.equal(trained[k], warm[k])]
    assert changed, "RL changed no parameter of the HF policy"
