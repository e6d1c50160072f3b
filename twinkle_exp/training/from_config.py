"""The objects of one experiment built from its checked config: the run's and the benchmarks' one recipe."""

from __future__ import annotations

import torch
from hydra.utils import instantiate

from twinkle_exp.config.schema import Config
from twinkle_exp.lifecycle.run_end import RunEnd
from twinkle_exp.policy.build import Policy, with_task_prompt_format
from twinkle_exp.rewards import build_rewards
from twinkle_exp.rewards.overlong import OverlongShaping
from twinkle_exp.tasks import Task
from twinkle_exp.training.module import PolicyModule


def policy_and_task(cfg: Config) -> tuple[Policy, Task]:
    """The policy at its initial weights, its prompts in the chat template when the task asks, and the task."""
    torch.manual_seed(cfg.warmup.seed)  # the initial weights belong to the warm-start, not to the RL seed
    policy = instantiate(cfg.policy)
    task = instantiate(cfg.task)
    return with_task_prompt_format(policy, task), task


def overlong_shaping(cfg: Config) -> OverlongShaping | None:
    """DAPO's overlong penalty over the last `reward.overlong_buffer` tokens of the budget (0: off)."""
    if cfg.reward.overlong_buffer == 0:
        return None
    return OverlongShaping(
        cfg.rollout.max_new_tokens, cfg.reward.overlong_buffer, cfg.reward.overlong_penalty
    )


def policy_module(cfg: Config, policy: Policy, task: Task, run_end: RunEnd | None = None) -> PolicyModule:
    """`policy` (warm-started or not) and `task` with the config's rewards, loss and settings; `run_end`:
    the run's budget (None: the trainer's that fits it)."""
    return PolicyModule(
        policy,
        task,
        build_rewards(cfg.reward.functions, cfg.reward.truncated_max, overlong_shaping(cfg)),
        instantiate(cfg.loss),
        rollout=cfg.rollout,
        advantage=cfg.advantage,
        optim=cfg.optim,
        trainer=cfg.trainer,
        seed=cfg.seed,
        run_end=run_end,
    )
