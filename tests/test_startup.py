"""Every bad setting is refused at start-up, all at once, one line each, exit status 2, no traceback."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading

import pytest
import torch
from hydra import compose

from twinkle_exp.config.checks import config_problems, override_problems
from twinkle_exp.config.schema import WarmupConfig
from twinkle_exp.config.store import register_configs
from twinkle_exp.policy.build import tiny_policy
from twinkle_exp.tasks import JsonlTask, ReverseTask
from twinkle_exp.training.warmup import warm_start
from twinkle_exp.training.warmup_cache import cache_key

register_configs()


pytestmark = pytest.mark.usefixtures("hydra_conf")  # conftest.py: the shipped config tree


def problems(*overrides: str) -> list[str]:
    return config_problems(compose(config_name="config", overrides=list(overrides)))


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("optim.max_grad_norm=-1", "optim.max_grad_norm must be >= 0, got -1"),
        ("optim.mu=0", "optim.mu must be a positive integer, got 0"),
        ("rollout.group_size=1", "rollout.group_size must be an integer >= 2, got 1"),
        ("optim.micro_batch_size=0", "optim.micro_batch_size must be a positive integer, got 0"),
        ("optim.micro_batch_size=-1", "optim.micro_batch_size must be a positive integer, got -1"),
        ("optim.lr=-1", "optim.lr must be > 0, got -1"),
        ("optim.num_minibatches=0", "optim.num_minibatches must be a positive integer, got 0"),
        ("optim.num_minibatches=500", "optim.num_minibatches=500: a rollout has only 128 samples"),
        ("optim.old_logps=maybe", "optim.old_logps must be one of ['auto', 'recompute', 'sampler']"),
        ("trainer.val_every=0", "trainer.val_every must be a positive integer, got 0"),
        ("trainer.samples_every=0", "trainer.samples_every must be a positive integer, got 0"),
        ("trainer.samples_file_rows=-1", "trainer.samples_file_rows must be an integer >= 0, got -1"),
        ("trainer.samples_file_mb=0", "trainer.samples_file_mb must be > 0, got 0"),
        ("trainer.max_steps=-5", "trainer.max_steps must be an integer >= 0, got -5"),
        ("advantage.scale=bogus", "advantage.scale must be one of ['group', 'batch', 'none'], got 'bogus'"),
        ("rollout.temperature=0", "rollout.temperature must be > 0, got 0"),
        ("rollout.top_p=0", "rollout.top_p must be > 0, got 0"),
        ("rollout.top_p=1.5", "rollout.top_p must be <= 1, got 1.5"),
        ("+foo=1", "+foo: 'foo' is not a config group or key"),
        ("+ckpt_path=x", "+ckpt_path: 'ckpt_path' is not a config group or key"),
        ("+lose=sapo", "+lose: 'lose' is not a config group or key (did you mean 'loss'?)"),
        ("+rollout.bogus=2", "rollout.bogus: not a setting of rollout"),
        ("+loss.tua=2", "loss.tua: not a setting of loss"),
        ("policy=hf", "policy.name_or_path is mandatory"),
        ("policy.n_heads=3", "d_model (128) must be divisible by n_heads (3)"),
        (
            "policy.max_seq_len=12",
            "policy.max_seq_len=12: prompts of up to 12 tokens plus rollout.max_new_tokens=8",
        ),
        ("loss=sapo loss.tau=-1", "loss.tau must be > 0, got -1"),
        ("+reward.functions.mine={fn:3}", "reward.functions.mine="),
        ("+reward.functions.mine={fn:{_target_:os.getcwd}}", "reward.functions.mine.fn: "),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(override, line):
    found = problems(*override.split(" "))
    assert any(line in p for p in found), found
    assert len(found) == 1, found


def test_every_problem_is_listed_at_once():
    found = problems("optim.lr=-1", "optim.mu=0", "rollout.group_size=1", "+foo=1", "trainer.val_every=0")
    assert len(found) == 5, found


def test_the_defaults_and_every_shipped_option_pass():
    assert problems() == []
    assert problems("reward=shaped", "loss=drgrpo", "task=addition", "advantage=batch") == []


def test_a_typo_in_a_group_name_is_caught_before_hydra_misleads():
    # Hydra's own answer to `lose=sapo` is "use +lose=sapo", which would train the default loss silently.
    assert override_problems(["lose=sapo", "loss.tau=0.5", "-m", "+x=1"]) == [
        "lose=sapo: 'lose' is not a config group or key (did you mean 'loss'?)"
    ]


def test_lora_settings_need_the_lora_policy():
    # Hydra itself fails on policy=hf's `lora: null` with an AssertionError and a traceback.
    assert override_problems(["policy=hf", "policy.lora.r=4"]) == [
        "policy.lora.r=4: policy=hf has no LoRA settings; use policy=hf_lora policy.name_or_path=... to train "
        "LoRA adapters"
    ]
    assert override_problems(["policy=hf_lora", "policy.lora.r=4"]) == []
    assert override_problems(["-m", "policy=hf,hf_lora", "policy.lora.r=4"]) == []


def test_wandb_online_without_a_login(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    assert any("wandb has no login" in p for p in problems("logger.mode=online")), problems(
        "logger.mode=online"
    )
    assert problems("logger.mode=online", "logger.wandb=false") == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is there")
def test_gpu_trainer_without_a_gpu():
    assert problems("trainer=gpu") == ["trainer.accelerator=gpu: no GPU is visible here (use trainer=cpu)"]


def test_a_jsonl_character_the_built_in_tokenizer_cannot_encode_names_file_and_line(tmp_path):
    data = tmp_path / "train.jsonl"
    lines = [json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) for i in range(40)]
    lines[6] = json.dumps({"prompt": "caf\u00e9=", "answer": "x"})
    data.write_text("\n".join(lines) + "\n")
    found = problems("task=jsonl", f"task.path={data}", "task.num_validation=4")
    assert found == [
        f"{data}, line 7: '\u00e9' is not in the built-in policy's character set; use policy=hf for such text"
    ]


# --- the command line: exit status 2, no traceback, a first line quickly ----------------------------------
@pytest.mark.slow
def test_the_cli_lists_every_problem_and_exits_2(run_cli, tmp_path):
    proc = run_cli(
        "optim.max_grad_norm=-1", "optim.mu=0", "rollout.group_size=1", "optim.micro_batch_size=0", "+foo=1"
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line.strip() for line in proc.stderr.splitlines()]
    assert lines[0] == "twinkle_exp: 5 problem(s) in the config:", lines
    assert len(lines) == 6, lines
    assert not (tmp_path / "outputs").exists() or not list(tmp_path.glob("outputs/*/*/run.json"))


@pytest.mark.slow
def test_the_cli_catches_a_typo_d_group(run_cli):
    proc = run_cli("lose=sapo")
    assert proc.returncode == 2
    assert "did you mean 'loss'?" in proc.stderr and "+lose" not in proc.stderr


# --- custom rewards, from the command line and from a yaml file ------------------------------------------
SHOUT = "def shout(prompts, completions, answers):\n    return [float(c.isupper()) for c in completions]\n"


# What a refusal must not import: the trainer's stack loads only once the config is known to be good.
HEAVY_MODULES = ("lightning", "transformers", "torch.distributed.fsdp", "wandb", "peft", "datasets")


@pytest.mark.slow
def test_a_refused_setting_imports_neither_lightning_nor_transformers(tmp_path, cli_env):
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "twinkle_exp", "optim.lr=-1"],
        cwd=tmp_path,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "optim.lr" in proc.stderr
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "twinkle_exp.config.checks" in imported  # the check ran in this process
    assert not imported & set(HEAVY_MODULES), sorted(imported & set(HEAVY_MODULES))


def _reward_logged(run_dir) -> bool:
    import csv

    with open(run_dir / "metrics.csv") as f:
        return any(row.get("train/rewards/mine") not in (None, "") for row in csv.DictReader(f))


@pytest.mark.slow
def test_a_custom_reward_from_the_command_line(run_cli, tmp_path):
    (tmp_path / "myrewards.py").write_text(SHOUT)  # python -m puts the working directory on sys.path
    proc = run_cli(
        "+reward.functions.mine={fn: {_target_: myrewards.shout, _partial_: true}, weight: 0.5}", "debug=fast"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_json] = tmp_path.glob("outputs/*/*/run.json")
    assert _reward_logged(run_json.parent)


@pytest.mark.slow
def test_a_custom_reward_from_a_yaml_file(run_cli, tmp_path):
    (tmp_path / "myrewards.py").write_text(SHOUT)
    (tmp_path / "conf" / "reward").mkdir(parents=True)
    (tmp_path / "conf" / "reward" / "mine.yaml").write_text(
        "defaults:\n  - /schema/reward@_here_: base\n  - _self_\nfunctions:\n"
        "  mine:\n    fn: {_target_: myrewards.shout, _partial_: true}\n    weight: 0.5\n"
    )
    proc = run_cli("reward=mine", f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "debug=fast")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_json] = tmp_path.glob("outputs/*/*/run.json")
    assert _reward_logged(run_json.parent)


@pytest.mark.slow
def test_a_reward_function_that_raises_ends_in_one_line_and_run_json(run_cli, tmp_path):
    (tmp_path / "myrewards.py").write_text("def broken(prompts, completions, answers):\n    return 1 / 0\n")
    proc = run_cli("+reward.functions.mine={fn: {_target_: myrewards.broken, _partial_: true}}", "debug=fast")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "reward function 'mine' raised ZeroDivisionError: division by zero" in proc.stderr
    [run_json] = tmp_path.glob("outputs/*/*/run.json")
    status = json.loads(run_json.read_text())
    assert (
        status["status"] == "failed" and "reward function 'mine' raised ZeroDivisionError" in status["error"]
    )


# --- the warm-start cache ----------------------------------------------------------------------------------
WARM = WarmupConfig(steps=2, batch_size=4)


def _policy():
    torch.manual_seed(0)
    return tiny_policy(d_model=32, n_layers=1, n_heads=2, max_seq_len=32)


def _warm(tmp_path, task=None):
    policy, task = _policy(), task or ReverseTask(max_len=4, num_validation=4)
    cfg = WarmupConfig(steps=WARM.steps, batch_size=WARM.batch_size, cache_dir=str(tmp_path))
    return policy, warm_start(policy, task, cfg, cache_key({}, {}, cfg, policy, task))


def test_a_truncated_cache_file_is_rebuilt_with_a_warning_naming_it(tmp_path, caplog):
    policy, first = _warm(tmp_path)
    path = first["path"]
    with open(path, "r+b") as f:
        f.truncate(100)
    again, second = _warm(tmp_path)
    assert second["cached"] is False and path in caplog.text and "unusable" in caplog.text
    for a, b in zip(policy.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(a, b)  # the same warm-start as before the damage
    assert _warm(tmp_path)[1]["cached"] is True


def test_a_foreign_cache_file_leaves_the_model_untouched_and_is_rebuilt(tmp_path, caplog):
    policy, first = _warm(tmp_path)
    torch.save({"other.weight": torch.zeros(3)}, first["path"])
    again, second = _warm(tmp_path)
    assert second["cached"] is False and "other weights" in caplog.text
    for a, b in zip(policy.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_cache_file_is_readable_by_the_group(tmp_path):
    _, first = _warm(tmp_path)
    assert os.stat(first["path"]).st_mode & stat.S_IRGRP


def test_editing_a_jsonl_file_in_place_changes_the_key(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}=", "answer": str(i)}) + "\n" for i in range(20)))
    policy, cfg = _policy(), WarmupConfig()
    before = cache_key({}, {}, cfg, policy, JsonlTask(str(data), num_validation=4))
    data.write_text(data.read_text().replace('"answer": "3"', '"answer": "x"'))
    assert cache_key({}, {}, cfg, policy, JsonlTask(str(data), num_validation=4)) != before


def test_parallel_jobs_train_the_warm_start_once(tmp_path):
    results = []
    threads = [threading.Thread(target=lambda: results.append(_warm(tmp_path)[1])) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r["cached"] for r in results) == [False, True, True]
