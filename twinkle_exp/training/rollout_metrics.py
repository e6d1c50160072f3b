"""What one rollout measured (rewards, advantages, lengths, stage timings), keyed as the trainer logs it."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from twinkle_exp import metric_names as M
from twinkle_exp.loss.advantages import AdvantageResult
from twinkle_exp.parallel import collectives
from twinkle_exp.training.prompt_repeats import REPEAT_RUN, REPEAT_SHARE

log = logging.getLogger(__name__)
# A rollout (or the start-up validation) with more than this share of its completions cut off at the budget,
# or repeating the prompt, is warned of.
TRUNCATED_MOST = 0.5


class StageTimer:
    """Wall-clock seconds of the named stages of one training step: `with timer(M.TIME_ROLLOUT): ...`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, key: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[key] = time.perf_counter() - start


@dataclass
class RolloutRows:
    """The per-row figures of one rollout that its metrics and advantages are computed from."""

    rewards: torch.Tensor  # [N] total (weighted) reward per row
    per_fn: dict[str, torch.Tensor]  # {reward function name: [N] unweighted reward}
    lengths: torch.Tensor  # [N] completion tokens per row, EOS included
    truncated: torch.Tensor  # [N] bool, max_new_tokens reached without EOS
    filtered_mass: torch.Tensor | None = None  # [N] top-k/top-p's removed mass summed over the row's tokens
    repeats_prompt: torch.Tensor | None = None  # [N] bool, the completion repeats its prompt (prompt_repeats)

    def gathered(self) -> RolloutRows:
        """Every data-parallel rank's rows, rank 0's first (one collective): the global batch, exactly as one
        process holding all of them would have it. Rows stay whole groups, so groups never mix."""
        names = sorted(self.per_fn)
        # The optional columns are present or absent on every rank alike.
        filtered = [] if self.filtered_mass is None else [self.filtered_mass]
        repeats = [] if self.repeats_prompt is None else [self.repeats_prompt]
        columns = [self.rewards, *(self.per_fn[n] for n in names), self.lengths, self.truncated]
        columns += [*filtered, *repeats]
        local = torch.stack(
            [c.detach().to("cpu", torch.float64) for c in columns], dim=1
        )  # [N, 3 + fns (+ 2)]
        everyone = collectives.all_gather_rows(local)  # [ranks * N, 3 + fns (+ 2)]
        last = 1 + len(names) + 2  # the first optional column
        return RolloutRows(
            rewards=everyone[:, 0].to(self.rewards.dtype),
            per_fn={n: everyone[:, 1 + i].to(self.per_fn[n].dtype) for i, n in enumerate(names)},
            lengths=everyone[:, last - 2].long(),
            truncated=everyone[:, last - 1].bool(),
            filtered_mass=everyone[:, last] if filtered else None,
            repeats_prompt=everyone[:, last + len(filtered)].bool() if repeats else None,
        )


# A completion is "correct" when its total reward reaches this: the verifiable term's full score (exact or
# math: 1 for a right answer). Shaping terms keep a wrong answer below it (partial credit <= 0.5, penalties
# <= 0, format 0.1), so on the built-in rewards this is the reward's verdict. The one definition of
# "correct" behind every metric split by correctness.
CORRECT_REWARD = 1.0


def is_correct(rewards: torch.Tensor) -> torch.Tensor:
    """`[N]` bool from `[N]` total rewards: the completions the reward judged right."""
    return rewards >= CORRECT_REWARD


def length_by_correctness(rows: RolloutRows) -> dict[str, float]:
    """Mean completion length of the correct and of the incorrect rows; a key is left out (not NaN, which
    the report counts as a fault) when the rollout has no row of its kind."""
    correct = is_correct(rows.rewards)
    lengths = rows.lengths.double()
    out = {}
    for key, rows_of_kind in (
        (M.COMPLETION_LENGTH_CORRECT, correct),
        (M.COMPLETION_LENGTH_INCORRECT, ~correct),
    ):
        if rows_of_kind.any():
            out[key] = float(lengths[rows_of_kind].mean())
    return out


def _std(values: torch.Tensor) -> torch.Tensor:
    return values.std() if values.numel() > 1 else torch.tensor(0.0)


def rollout_metrics(
    rows: RolloutRows, adv: AdvantageResult, seconds: dict[str, float], *, epochs: int
) -> dict[str, float]:
    """Metrics of one rollout from its `rows`, their advantages `adv` (`[N]`) and the stages' wall `seconds`.

    `epochs` (optim.mu) is how often the update went over the rollout's tokens, for the update's throughput.
    """
    tokens = float(rows.lengths.sum())
    t = seconds
    metrics = {
        M.REWARD_MEAN: rows.rewards.mean(),
        M.REWARD_STD: _std(rows.rewards),
        M.FRAC_REWARD_ZERO_STD: adv.frac_zero_std,
        M.ADVANTAGE_MEAN: adv.advantages.mean(),
        M.ADVANTAGE_STD: _std(adv.advantages),
        M.ADVANTAGE_ABS_MEAN: adv.advantages.abs().mean(),
        M.COMPLETION_MEAN_LENGTH: rows.lengths.float().mean(),
        M.COMPLETION_CLIPPED_RATIO: rows.truncated.float().mean(),
        **t,
        M.ROLLOUT_TOKENS_PER_S: tokens / max(t[M.TIME_ROLLOUT], 1e-9),
        M.UPDATE_TOKENS_PER_S: tokens * epochs / max(t[M.TIME_UPDATE], 1e-9),
        **{M.REWARD_PREFIX + name: values.mean() for name, values in rows.per_fn.items()},
    }
    if rows.filtered_mass is not None:
        metrics[M.SAMPLER_FILTERED_MASS] = rows.filtered_mass.sum() / max(tokens, 1.0)
    if rows.repeats_prompt is not None:
        metrics[M.COMPLETION_REPEATS_PROMPT_RATIO] = rows.repeats_prompt.float().mean()
    return {key: float(value) for key, value in metrics.items()} | length_by_correctness(rows)


class TruncationWatch:
    """Says plainly when most completions of a rollout end at `rollout.max_new_tokens` without EOS, or repeat
    their prompt (`prompt_repeats`).

    Otherwise truncation shows only as groups with identical rewards (every cut-off completion capped at
    `reward.truncated_max`), or, with no cap, as a reward that may come from text the model repeats rather
    than from an answer; a repeated prompt shows nowhere. Each kind warns at its first such rollout and at
    every `every`-th one after, naming the optimizer steps where it happened and quoting a few completions.
    """

    def __init__(self, max_new_tokens: int, truncated_max: float | None, every: int = 10):
        self.max_new_tokens, self.truncated_max, self.every = max_new_tokens, truncated_max, every
        self.steps: list[int] = []  # optimizer steps whose rollout was mostly cut off
        self.repeat_steps: list[int] = []  # optimizer steps whose rollout mostly repeated its prompts

    def observe(self, clipped_ratio: float, step: int, examples: list[str] | None = None) -> str | None:
        """Record one rollout's share of cut-off completions (after optimizer step `step`), with a few of
        them as `examples`; the warning or None."""
        if not _noted(clipped_ratio, step, self.steps, self.every):
            return None
        if self.truncated_max is None:
            effect = (
                "they are scored as they stand (reward.truncated_max=null), so a rising reward may come from "
                "text the model repeats rather than from an answer"
            )
        else:
            effect = f"their reward is capped at reward.truncated_max={self.truncated_max:g}"
        message = (
            f"{clipped_ratio:.0%} of the completions of the rollout ending at optimizer step {step} stopped at "
            f"rollout.max_new_tokens={self.max_new_tokens} without EOS (most were, in {len(self.steps)} "
            f"rollout(s): steps {_some_steps(self.steps)}); {effect}. Raise rollout.max_new_tokens or ask "
            f"the prompt for a shorter answer{_quoted(examples)}"
        )
        log.warning(message)
        return message

    def observe_repeats(
        self, repeats_ratio: float, step: int, examples: list[str] | None = None
    ) -> str | None:
        """Record one rollout's share of completions that repeat their prompt, with a few of them as
        `examples`; the warning or None."""
        if not _noted(repeats_ratio, step, self.repeat_steps, self.every):
            return None
        message = (
            f"{repeats_ratio:.0%} of the completions of the rollout ending at optimizer step {step} repeat "
            f"their prompt (runs of {REPEAT_RUN}+ of its tokens make up {REPEAT_SHARE:.0%}+ of theirs; most did, in {len(self.repeat_steps)} "
            f"rollout(s): steps {_some_steps(self.repeat_steps)}); a reward that rises now may pay for the "
            "question restated rather than for an answer. Check that the reward scores the final answer only "
            f"(reward=math does) and ask the prompt for just the answer{_quoted(examples)}"
        )
        log.warning(message)
        return message


def _noted(ratio: float, step: int, steps: list[int], every: int) -> bool:
    """Whether a rollout with this share of flagged completions is warned of; records its step if most are."""
    if not ratio > TRUNCATED_MOST:
        return False
    steps.append(step)
    return (len(steps) - 1) % every == 0


def _quoted(examples: list[str] | None, shown: int = 3, width: int = 60) -> str:
    """ "; for example 'abc…', 'de'": the first `shown` examples, each cut to `width` characters."""
    if not examples:
        return ""
    cut = [text if len(text) <= width else text[:width] + "…" for text in examples[:shown]]
    return "; for example " + ", ".join(repr(text) for text in cut)


def _some_steps(steps: list[int], head: int = 5) -> str:
    """The first `head` steps and the latest: "0, 4, 8, 12, 16, ..., 40"."""
    shown = [str(x) for x in steps[:head]]
    if len(steps) > head:
        shown += ["...", str(steps[-1])] if len(steps) > head + 1 else [str(steps[-1])]
    return ", ".join(shown)


SAMPLE_COLUMNS = ["prompt", "completion", "answer", "reward"]


def sample_rows(plan: Any, shown: int = 32) -> list[tuple[str, str, str, float]]:
    """The rollout's first `shown` rows as SAMPLE_COLUMNS, for the loggers' samples table."""
    rollout = plan.rollout
    prompts, answers = rollout.per_row(plan.prompts), rollout.per_row(plan.answers)
    return list(zip(prompts, rollout.completions, answers, plan.rewards.tolist(), strict=True))[:shown]


def samples_file_fields(plan: Any, step: int, rollout_index: int, final: bool) -> dict[str, Any]:
    """The rollout as `tracking.samples_logger.keep_samples` takes it: this rank's rows, per row."""
    from twinkle_exp.training.prompt_repeats import rollout_repeats_prompt

    rollout = plan.rollout
    return dict(
        step=step,
        rollout=rollout_index,
        prompts=rollout.per_row(plan.prompts),
        completions=rollout.completions,
        answers=rollout.per_row(plan.answers),
        rewards=plan.rewards,  # [N]
        per_fn=plan.per_fn,  # {name: [N]}
        advantages=plan.adv.advantages,  # [N]
        lengths=rollout.completion_lengths,  # [N]
        truncated=rollout.truncated,  # [N] bool
        repeats=rollout_repeats_prompt(rollout),  # [N] bool
        group_size=rollout.group_size,
        final=final,
    )
