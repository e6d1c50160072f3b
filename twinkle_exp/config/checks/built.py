"""Built objects: the rewards, the loss, the task and the built-in policy, built (cheaply), and the task's
examples against the policy and the reward (`examples`).

Building is what checks their own relations (clip_ratio_c on a loss that does not clip, heads that do not
divide the width, a task's file and rows): each object's own message, with the setting it is about.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig

from twinkle_exp.config.checks import examples
from twinkle_exp.config.schema import RewardConfig, skip_zero_advantage_problem, whole_groups_problem
from twinkle_exp.errors import UserError


def built_problems(cfg: DictConfig, plain: dict[str, Any], chosen: dict[str, str | None]) -> Iterator[str]:
    """Build the rewards and the task (cheap: it reads its file or draws its held-out set), fit its text.

    `chosen`: `{group: the registered option its _target_ names}` (None: a class of the user's own).
    """
    from hydra.utils import instantiate

    from twinkle_exp.rewards import build_rewards

    try:
        reward = RewardConfig(**plain["reward"])
        build_rewards(reward.functions, reward.truncated_max)
    except UserError as exc:
        yield str(exc)
    try:  # the loss's relations between its parameters (clip_ratio_c on a loss that does not clip, ...)
        loss = instantiate(cfg.loss)
    except Exception as exc:
        cause = exc.__cause__ or exc
        yield f"loss={chosen['loss'] or cfg.loss.get('_target_', '')}: {cause}"
    else:
        skip, estimator = plain["optim"].get("skip_zero_advantage", False), plain["advantage"]["estimator"]
        problem = skip_zero_advantage_problem(skip, loss, estimator)
        if problem is not None:
            yield problem
        problem = whole_groups_problem(loss, plain["optim"], plain["rollout"]["group_size"])
        if problem is not None:
            yield problem
    try:
        task = instantiate(cfg.task)
        if chosen["policy"] == "tiny":
            instantiate(cfg.policy)  # milliseconds; checks the model's own relations (heads divide width)
    except Exception as exc:  # the task's or model's own message names the file, line or setting
        cause = exc.__cause__ or exc
        yield f"{type(cause).__name__}: {cause}"
        return
    yield from _task_fit(task, plain, chosen["policy"])


def _task_fit(task: Any, plain: dict[str, Any], policy: str | None) -> Iterator[str]:
    """The task's examples against the policy's tokenizer and positions, and the reward's gold answers."""
    try:
        fit = examples.policy_tokenizer(policy, plain["policy"], task)
    except (ValueError, ImportError) as exc:  # no such model directory, no chat template, ...
        yield str(exc)
        return
    located = _located(task)
    if policy == "tiny":
        bad_text = next(_tiny_charset_problems(located), None)
        if bad_text is not None:
            yield bad_text
            return
    budget = plain["rollout"]["max_new_tokens"]
    if fit is not None:
        tokenizer, positions, limit, remedy = fit
        yield from examples.prompt_length_problems(located, tokenizer, positions, budget, limit, remedy)
        truncated_max = plain["reward"].get("truncated_max")
        yield from examples.answer_budget_problems(located, tokenizer, budget, truncated_max)
    yield from examples.gold_answer_problems(located, plain["reward"])


def _tiny_charset_problems(located: list[tuple[Any, str]]) -> Iterator[str]:
    from twinkle_exp.models import CharTokenizer

    tokenizer = CharTokenizer()
    for example, where in located:
        # Each distinct character once: a runaway 50 MB line costs a second, not minutes.
        bad = sorted(ch for ch in set(example.prompt) | set(example.answer) if not _encodable(tokenizer, ch))
        if bad:
            yield f"{where}: {bad[0]!r} is not in the built-in policy's character set; use policy=hf for such text"


def _located(task: Any) -> list[tuple[Any, str]]:
    """(example, where) for every example of a `Task`; a task of the user's own without the method: drawn."""
    if hasattr(task, "located_examples"):
        return task.located_examples()
    drawn = task.validation_set() + task.sample(512, random.Random(0))
    return [(example, f"task prompt {example.prompt!r}") for example in drawn]


def _encodable(tokenizer: Any, ch: str) -> bool:
    try:
        tokenizer.encode(ch)
    except ValueError:
        return False
    return True
