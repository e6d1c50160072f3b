"""One RL step as plain functions, in the order they run:

    sample  -> `RolloutBatch`   group_size completions per prompt, with the sampler's log-probs
    score   -> `Scores`         rewards, and the NaN-reward recovery (such a rollout's steps are skipped)
    plan    -> `UpdatePlan`     advantages, the reference's and the old log-probs, each optimizer step's rows
    optimizer_step (x mu * num_minibatches)   forward, loss, backward, clip, step; its metrics
    rollout_summary -> the rollout's metrics, once its last optimizer step is done

`PolicyModule` (module.py) calls them from Lightning's hooks; tests/test_rl_step.py calls them by hand and
gets the same weights. Under data parallelism each rank samples and trains on its own prompts' groups;
advantages, the losses' normalisers and the metrics are the global batch's (docs/scaling-out.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from twinkle_exp import metric_names as M
from twinkle_exp.lifecycle.nonfinite import NonFiniteGuard
from twinkle_exp.lifecycle.run_end import RunEnd
from twinkle_exp.loss.advantages import estimate, estimators
from twinkle_exp.parallel import collectives
from twinkle_exp.parallel.sharding import gathered
from twinkle_exp.policy.logprobs import sequence_logps
from twinkle_exp.rewards import NonFiniteRewardError
from twinkle_exp.sampling.generate import Decoding, RolloutBatch, generate
from twinkle_exp.tracking.loggers import log_metrics
from twinkle_exp.training import dynamic_sampling
from twinkle_exp.training.greedy_baseline import greedy_rewards
from twinkle_exp.training.old_logps import recompute_old_logps
from twinkle_exp.training.prompt_repeats import rollout_repeats_prompt
from twinkle_exp.training.rollout_metrics import RolloutRows, StageTimer, rollout_metrics
from twinkle_exp.training.step_parts import StepParts, advantage_settings, loss_extras, sampling_options
from twinkle_exp.training.update_plan import UpdatePlan, shuffled_steps
from twinkle_exp.training.update_step import accumulate_gradients

log = logging.getLogger(__name__)
Batch = dict[str, list[str]]  # the prompt stream's: "prompts" and "answers", one per group


# --- sample ------------------------------------------------------------------------------------------------
def sample(parts: StepParts, prompts: list[str], generator: torch.Generator) -> RolloutBatch:
    """`rollout.group_size` completions of each of `prompts`, drawn with `generator` (on the device), from
    the policy of `rollout.staleness` optimizer steps ago (staleness.py; 0: the policy as it is)."""
    parts.policy.eval()
    with gathered(parts.policy), parts.lagged.weights(parts.policy) as behaviour:
        return generate(
            parts.sampler_copy(behaviour),
            parts.tokenizer,
            prompts,
            sampling_options(parts.rollout),
            generator=generator,
            decoding=Decoding.auto(parts.policy, parts.device, parts.rollout.cascade_attention),
        )


# --- score -------------------------------------------------------------------------------------------------
@dataclass
class Scores:
    rewards: torch.Tensor  # [N] this rank's total reward per row; NaN throughout when one was not finite
    per_fn: dict[str, torch.Tensor]  # {reward function: [N] unweighted}
    everyone: RolloutRows  # every rank's rows, [ranks x N] per column: the global batch
    non_finite: str | None  # "reward" when any rank's rewards were not finite: every rank skips the steps
    metrics: dict[str, float]  # what this rank's reward functions counted (RewardSet.last_metrics)


def score(parts: StepParts, batch: Batch, rollout: RolloutBatch, step: int) -> Scores:
    """The rollout's rewards, gathered over the ranks; a non-finite reward marks the rollout unusable."""
    prompts, answers = rollout.per_row(batch["prompts"]), rollout.per_row(batch["answers"])
    non_finite = None
    try:
        rewards, per_fn = parts.rewards(
            prompts, rollout.completions, answers, rollout.truncated, rollout.completion_lengths
        )
    except NonFiniteRewardError as exc:
        # The rollout's steps are skipped (and counted); its advantages only need to exist.
        log.warning("after optimizer step %d: %s; the rollout's optimizer steps are skipped", step, exc)
        non_finite = "reward"
        rewards = torch.full((len(rollout.completions),), float("nan"))
        # Every reward function's column, so that every rank gathers the same columns.
        per_fn = {name: rewards.clone() for name in parts.rewards.columns()}
    # Every rank computes the advantages of the global batch (its groups are whole, so only the batch-level
    # estimators, advantage=batch's std and REINFORCE++'s whitening, need the others' rows) and trains on its own.
    everyone = RolloutRows(rewards, per_fn, rollout.completion_lengths, rollout.truncated).gathered()
    if non_finite is None and not torch.isfinite(everyone.rewards).all():
        non_finite = "reward"  # another rank's
    return Scores(rewards, per_fn, everyone, non_finite, dict(parts.rewards.last_metrics))


# --- plan --------------------------------------------------------------------------------------------------
def plan(
    parts: StepParts,
    batch: Batch,
    rollout: RolloutBatch,
    scores: Scores,
    shuffler: torch.Generator,
    timer: StageTimer,
    greedy: torch.Tensor | None = None,
) -> UpdatePlan:
    """Everything the rollout's optimizer steps need: advantages, each step's rows (drawn with `shuffler`),
    the reference's log-probs and, when they are recomputed, the old log-probs. `greedy`: `[groups over every
    rank]`, ReMax's greedy rewards (`greedy_baseline`), for an estimator with `needs_greedy_baseline`."""
    finite = torch.nan_to_num(scores.everyone.rewards, nan=0.0, posinf=0.0, neginf=0.0)
    a = parts.advantage
    baseline = None if greedy is None else torch.nan_to_num(greedy, nan=0.0, posinf=0.0, neginf=0.0)
    adv = estimate(
        a.estimator, finite, rollout.group_size, scores.everyone.lengths, advantage_settings(a), baseline
    )
    non_finite = scores.non_finite
    if non_finite is None and greedy is not None and not torch.isfinite(greedy).all():
        non_finite = "reward"  # a greedy baseline's
    if non_finite is None and not torch.isfinite(adv.advantages).all():
        non_finite = "advantage"
    opt, n = parts.optim, rollout.input_ids.shape[0]
    out = UpdatePlan(
        prompts=list(batch["prompts"]),
        answers=list(batch["answers"]),
        rollout=rollout,
        rewards=scores.rewards,
        per_fn=scores.per_fn,
        adv=adv,
        old_logps=rollout.old_logps,
        ref_logps=None,
        steps=shuffled_steps(
            n,
            opt.mu,
            opt.num_minibatches,
            shuffler,
            rollout.group_size if opt.minibatch_split == "groups" else None,
        ),
        non_finite=non_finite,
        reward_metrics=scores.metrics,
    )
    with timer(M.TIME_REFERENCE):
        out.ref_logps = reference_logps(parts, rollout, out)
    with timer(M.TIME_UPDATE):  # the old log-probs belong to the update's time
        if parts.recompute_old_logps:  # in the update's mode, which recompute_old_logps sets
            # The first epoch's minibatches cover every row, in the first optimizer step's micro-batches.
            first_epoch = out.steps[: opt.num_minibatches]
            split = [part for rows in first_epoch for part in rows.split(opt.micro_batch_size or n)]
            with parts.lagged.weights(parts.policy) as behaviour:  # the policy that sampled
                out.old_logps = recompute_old_logps(
                    behaviour, rollout, split, out.prefixes, rollout.temperature
                )
    out.seconds = dict(timer.seconds)
    return out


@torch.no_grad()
def reference_logps(parts: StepParts, rollout: RolloutBatch, plan: UpdatePlan) -> torch.Tensor | None:
    """`[N, P + C]` log-probs of the rollout's labels under the frozen reference; None without one."""
    if parts.reference is None:
        return None
    b = rollout
    with parts.reference.weights() as reference:
        prefix = plan.prefixes.for_rows(None, parts.device)
        args = (b.input_ids, b.attention_mask, b.position_ids, b.labels)
        logps, _ = sequence_logps(reference, *args, temperature=b.temperature, prefix=prefix)
    return logps


def new_rollout(
    parts: StepParts,
    batch: Batch,
    step: int,
    draw: Callable[[list[str]], RolloutBatch],
    shuffler: torch.Generator,
    fresh: Callable[[int], Batch] | None = None,
) -> UpdatePlan:
    """sample -> score -> plan: one rollout, ready for its optimizer steps (`draw` samples: `sample`).
    `fresh(n)`: n more prompts, for dynamic sampling's refills (`rollout.filter_zero_variance`)."""
    timer, stream_prompts, extra = StageTimer(), list(batch["prompts"]), {}
    with timer(M.TIME_ROLLOUT):
        rollout = draw(batch["prompts"])
    scores = score(parts, batch, rollout, step)
    if parts.rollout.filter_zero_variance and scores.non_finite is None:
        with timer(M.TIME_DYNAMIC_SAMPLING):
            batch, rollout, scores, extra = refilled(parts, batch, rollout, scores, step, draw, fresh)
    greedy = None
    if estimators()[parts.advantage.estimator].needs_greedy_baseline:
        with timer(M.TIME_GREEDY_BASELINE):
            greedy = greedy_rewards(parts, batch["prompts"], batch["answers"])
        extra[M.GREEDY_BASELINE_SAMPLES] = float(greedy.numel())
    out = plan(parts, batch, rollout, scores, shuffler, timer, greedy)
    out.sampling_metrics = extra
    if out.prompts != stream_prompts:
        out.stream_prompts = stream_prompts
    return out


def refilled(
    parts: StepParts, batch: Batch, rollout: RolloutBatch, scores: Scores, step: int,
    draw: Callable[[list[str]], RolloutBatch], fresh: Callable[[int], Batch] | None,
) -> tuple[Batch, RolloutBatch, Scores, dict[str, float]]:  # fmt: skip
    """Dynamic sampling's rollout (`dynamic_sampling.refill`): the batch, rows, scores and metrics."""
    if fresh is None:
        raise ValueError("rollout.filter_zero_variance=true needs a source of fresh prompts (fresh=)")
    r = dynamic_sampling.refill(
        batch, rollout, scores, draw=draw, score=lambda b, x: score(parts, b, x, step), fresh=fresh,
        max_extra_draws=parts.rollout.max_extra_draws, pad_id=parts.tokenizer.pad_token_id,
    )  # fmt: skip
    x = r.rollout
    everyone = RolloutRows(r.rewards, r.per_fn, x.completion_lengths, x.truncated).gathered()
    return r.batch, x, Scores(r.rewards, r.per_fn, everyone, None, scores.metrics), r.metrics


# --- optimizer steps ---------------------------------------------------------------------------------------
@dataclass
class GradientCheck:
    norm: torch.Tensor  # [] the global gradient norm, before clipping
    skipped_for: str | None  # the first non-finite quantity, when every rank skips this step


def check_gradients(
    policy: torch.nn.Module, optimizer: Any, max_grad_norm: float | None, guard: NonFiniteGuard, amp: bool
) -> GradientCheck:
    """Clip the (already averaged or sharded, already unscaled) gradients and decide, with every rank,
    whether the step is skipped; a skipped step's gradients are dropped, so the optimizer leaves the
    parameters alone. Runs inside `optimizer.step()` (Lightning's on_before_optimizer_step)."""
    max_norm = max_grad_norm or float("inf")  # 0 or None: measure, do not clip
    norm = collectives.full_value(torch.nn.utils.clip_grad_norm_(policy.parameters(), max_norm))
    if not amp:  # under 16-mixed an inf gradient is the loss scaler's business (it skips and scales down)
        guard.watch("gradient", norm)
    skipped_for = guard.decide(collectives.any_rank)
    if skipped_for is not None:
        optimizer.zero_grad(set_to_none=True)
    return GradientCheck(norm, skipped_for)


@dataclass
class Stepper:
    """What an optimizer step drives: Lightning's wrappers in a fit, plain torch objects by hand."""

    optimizer: Any  # zero_grad(), step() (which runs check_gradients first), param_groups
    scheduler: Any  # step()
    backward: Callable[[torch.Tensor], None]
    checked: Callable[[], GradientCheck]  # what check_gradients found in the last optimizer.step()
    steps_done: Callable[[], int]  # optimizer steps taken so far (Lightning's global_step)


def optimizer_step(
    parts: StepParts, plan: UpdatePlan, stepper: Stepper, guard: NonFiniteGuard
) -> tuple[dict[str, float], str | None]:
    """The plan's next optimizer step: its metrics (keyed as logged, at `stepper.steps_done()`), and why the
    run must stop (too many non-finite steps in a row) or None."""
    b = plan.rollout
    step_rows = plan.steps[plan.next_step]
    trained = plan.rows_with_gradient(step_rows) if parts.optim.skip_zero_advantage else step_rows
    rows = [r for r in trained.split(parts.optim.micro_batch_size or b.input_ids.shape[0]) if len(r)]
    micro = [(part.to(parts.device), plan.prefixes.for_rows(part, parts.device)) for part in rows]
    stepper.optimizer.zero_grad(set_to_none=True)
    if plan.non_finite is not None:
        guard.watch(plan.non_finite, True)
    stats = accumulate_gradients(
        parts.policy,
        parts.loss_fn,
        plan,
        micro,
        temperature=b.temperature,
        guard=guard,
        backward=stepper.backward,
        sampler_gap=plan.next_step == 0,
        extras=loss_extras(parts),
        step_rows=step_rows.to(parts.device),
    )
    lr = stepper.optimizer.param_groups[0]["lr"]
    parts.lagged.before_step(parts.policy, stepper.steps_done())
    stepper.optimizer.step()
    stepper.scheduler.step()
    plan.next_step += 1
    checked, step = stepper.checked(), stepper.steps_done()
    stop = guard.stop_message(step) if guard.record(step, checked.skipped_for) else None
    metrics = stats.summary(checked.norm, lr) | {M.SKIPPED_STEPS: float(guard.skipped)}
    if parts.optim.skip_zero_advantage:
        metrics[M.ZERO_ADVANTAGE_ROWS_SKIPPED] = 1.0 - len(trained) / len(step_rows)
    return metrics, stop


def optimizer_steps(
    parts: StepParts, plan: UpdatePlan, stepper: Stepper, guard: NonFiniteGuard, end: RunEnd,
    loggers: list[Any],
) -> bool:  # fmt: skip
    """The plan's optimizer steps, each logged to `loggers` at its own step, until the plan or `end`'s
    budget is done or a stop is voted (True; the rest stays in `plan`)."""
    while not plan.done and not end.done(stepper.steps_done()):
        metrics, stop = optimizer_step(parts, plan, stepper, guard)
        if stop is not None:
            end.stop(stop)
        log_metrics(loggers, metrics, stepper.steps_done())
        if end.vote():
            return True
    return False


# --- metrics -----------------------------------------------------------------------------------------------
def rollout_summary(parts: StepParts, plan: UpdatePlan, step: int, quote: bool) -> dict[str, float]:
    """The rollout's metrics over every rank (every rank calls it together); `quote`: warn of truncated or
    prompt-repeating completions, quoting this rank's own (rank 0's)."""
    rollout = plan.rollout
    repeats = rollout_repeats_prompt(rollout)  # [N] bool, this rank's rows
    everyone = RolloutRows(
        plan.rewards,
        plan.per_fn,
        rollout.completion_lengths,
        rollout.truncated,
        rollout.filtered_mass,
        repeats_prompt=repeats,
    ).gathered()
    seconds = collectives.max_over_ranks(plan.seconds)  # the slowest rank's
    metrics = rollout_metrics(everyone, plan.adv, seconds, epochs=parts.optim.mu)
    # What the reward functions counted (math: parse failures), over every rank's completions.
    metrics |= collectives.sum_over_ranks(plan.reward_metrics)
    metrics |= plan.sampling_metrics  # already every rank's
    if quote:
        texts = rollout.completions
        cut = [c for c, flag in zip(texts, rollout.truncated.tolist(), strict=True) if flag]
        parts.truncation.observe(metrics[M.COMPLETION_CLIPPED_RATIO], step, cut)
        repeating = [c for c, flag in zip(texts, repeats.tolist(), strict=True) if flag]
        parts.truncation.observe_repeats(metrics[M.COMPLETION_REPEATS_PROMPT_RATIO], step, repeating)
    return metrics
