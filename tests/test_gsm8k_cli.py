"""`python -m twinkle_exp task=gsm8k reward=math policy=hf_lora ...` end to end on a GSM8K-format file."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys

import pytest
import torch
from gsm8k_helpers import gsm8k_rows, write_jsonl

from twinkle_exp import metric_names as M

TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)


@pytest.mark.slow
def test_gsm8k_with_the_math_reward_and_lora_runs_from_the_cli(tiny_hf_dir, cli_env, tmp_path):
    from transformers import AutoTokenizer

    model_dir = shutil.copytree(tiny_hf_dir, tmp_path / "chat_model")  # the tiny model, with a chat template
    # Its 64 positions hold no chat-templated question (up to 111 tokens): the start-up check refuses them.
    # Llama's rotary positions have no weights, so 128 is the same model with room for the prompts.
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps(config | {"max_position_embeddings": 128}))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(model_dir)
    train = write_jsonl(tmp_path / "train.jsonl", gsm8k_rows(40))
    env = dict(cli_env, HF_DATASETS_CACHE=str(tmp_path / "hf_datasets"), HF_HUB_OFFLINE="1")
    args = [
        "policy=hf_lora",
        f"policy.name_or_path={model_dir}",
        "policy.lora.r=4",
        "policy.gradient_checkpointing=true",
        "task=gsm8k",
        f"task.path={train}",
        "task.chat_template=true",
        "task.system_prompt=Answer with a number.",
        "reward=math",
        "reward.functions.math.fn.timeout_s=2.0",
        "debug=fast",
        "warmup=none",  # as for an instruction-tuned model; adapters trained before RL would be folded in
        "logger=csv",
        "trainer.save_checkpoint=true",
        "rollout.max_new_tokens=6",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "twinkle_exp", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    [status_file] = tmp_path.glob("outputs/*/*/run.json")
    status = json.loads(status_file.read_text())
    assert status["status"] == "finished", status
    assert status["final"]["steps"] == 4
    with open(status_file.parent / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    math_rewards = [float(r[M.REWARD_PREFIX + "math"]) for r in rows if r.get(M.REWARD_PREFIX + "math")]
    assert math_rewards and all(0.0 <= v <= 1.0 for v in math_rewards)
    # A random model's 6 characters rarely hold a number: the checker counts those it could not parse.
    failures = [float(r[M.REWARD_PARSE_FAILURES]) for r in rows if r.get(M.REWARD_PARSE_FAILURES)]
    assert failures and all(0 <= v <= 16 for v in failures)  # 4 prompts x 4 samples per rollout
    assert [float(r[M.REWARD_CHECK_TIMEOUTS]) for r in rows if r.get(M.REWARD_CHECK_TIMEOUTS)]
    saved = torch.load(status["final"]["checkpoint"], map_location="cpu", weights_only=False)["state_dict"]
    assert saved and all("lora_" in key for key in saved)  # the adapters only
