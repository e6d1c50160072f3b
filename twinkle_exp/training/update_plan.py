"""One rollout and the optimizer steps still to run on it, kept so that a checkpoint can fall between steps.

A signal or a run of non-finite steps stops training after the current optimizer step, which is usually in
the middle of a rollout's `optim.mu x optim.num_minibatches` steps. The checkpoint then holds this plan, and
the resumed run finishes the same rollout on the same rows in the same order before it samples a new one,
which is what makes the resumed run equal to the uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

import torch

from twinkle_exp.logprobs import IGNORE_INDEX
from twinkle_exp.loss.advantages import AdvantageResult
from twinkle_exp.parallel import collectives
from twinkle_exp.policy.shared_prefix import PrefixIndex
from twinkle_exp.sampling.generate import RolloutBatch


@dataclass
class UpdatePlan:
    prompts: list[str]  # the rollout's prompts, one per group, as the stream gave them
    answers: list[str]  # their gold answers, one per group
    rollout: RolloutBatch
    rewards: torch.Tensor  # [N] total reward per row (may hold NaN or inf: see non_finite)
    per_fn: dict[str, torch.Tensor]  # {reward function: [N] unweighted}
    adv: AdvantageResult  # the global batch's advantages [ranks x N] (every rank's rows), from finite rewards
    old_logps: torch.Tensor  # [N, P + C] the loss's old log-probs (the sampler's, or recomputed)
    ref_logps: torch.Tensor | None  # [N, P + C] the reference's log-probs; None without a reference
    steps: list[torch.Tensor]  # each optimizer step's rows, [n_i] long, mu epochs x num_minibatches in order
    non_finite: str | None = None  # "reward" or "advantage" when the rollout itself is unusable
    next_step: int = 0  # index into steps of the next optimizer step to run
    seconds: dict[str, float] = field(default_factory=dict)  # stage timings so far (time/*_s)
    reward_metrics: dict[str, float] = field(default_factory=dict)  # this rank's RewardSet.last_metrics
    # What the extra sampling counted, over every rank: ReMax's greedy baseline, dynamic sampling's refills.
    sampling_metrics: dict[str, float] = field(default_factory=dict)
    # The prompts the stream gave, when dynamic sampling replaced some of them (None: `prompts`).
    stream_prompts: list[str] | None = None

    @functools.cached_property
    def prefixes(self) -> PrefixIndex:
        """The rollout's distinct prompts, for every log-prob pass on it (derived: not in a checkpoint).

        Built once per rollout: it reads the prompt columns on the host, a sync on a GPU."""
        return PrefixIndex.of(self.rollout)

    @functools.cached_property
    def label_ends(self) -> torch.Tensor:
        """`[N]` long on the host: one past each row's last labelled column (its prompt's width without one).

        A micro-batch needs no column past its rows' largest: a row's log-probs depend only on the columns
        before them, so the padding a longer row of the rollout put there is work without effect. Read once
        per rollout (a sync on a GPU)."""
        labelled = (self.rollout.labels != IGNORE_INDEX).cpu()
        columns = torch.arange(1, labelled.shape[1] + 1)
        return (labelled * columns).amax(1).clamp(min=self.prefixes.width)

    @functools.cached_property
    def _advantage_nonzero(self) -> torch.Tensor:
        """`[N]` bool on the host: this rank's rows whose advantage is not exactly 0 (a sync on a GPU, once)."""
        ranks = collectives.world_size()
        mine = self.adv.advantages.tensor_split(ranks)[collectives.rank()].cpu()
        return mine.ne(0).reshape(mine.shape[0], -1).any(1)

    def rows_with_gradient(self, rows: torch.Tensor) -> torch.Tensor:
        """`rows` (`[n]` long) less those whose advantage is exactly 0: a loss that is `zero_advantage_inert`
        gets no gradient from them (optim.skip_zero_advantage)."""
        return rows[self._advantage_nonzero[rows.cpu()].to(rows.device)]

    def check_replayed(self, prompts: list[str]) -> None:
        """A resumed run's stream must give the interrupted rollout's prompts again."""
        if prompts != (self.prompts if self.stream_prompts is None else self.stream_prompts):
            raise RuntimeError(
                "resume: the prompt stream did not replay the interrupted rollout's prompts; was the "
                "checkpoint written with another task or seed?"
            )

    @property
    def done(self) -> bool:
        return self.next_step >= len(self.steps)

    def to(self, device: torch.device | str) -> UpdatePlan:
        """The plan with its tensors on `device` (the rows stay where they are: they index CPU tensors too)."""
        return _map_tensors(self, lambda t: t.to(device))

    def state_dict(self) -> dict[str, Any]:
        """Plain containers and CPU tensors, for a checkpoint."""
        cpu = _map_tensors(self, lambda t: t.detach().cpu())
        state = {f.name: getattr(cpu, f.name) for f in dataclasses.fields(cpu)}
        state["rollout"] = dataclasses.asdict(cpu.rollout)
        state["adv"] = dataclasses.asdict(cpu.adv)
        return state

    @classmethod
    def from_state_dict(cls, state: dict[str, Any], sampled_with: dict[str, Any] | None = None) -> UpdatePlan:
        """The plan of `state_dict()`. `sampled_with` ({temperature, top_k, top_p}: the run's settings) fills
        in what a checkpoint written before the rollout carried them did not record."""
        values = dict(state)
        values["rollout"] = RolloutBatch(**((sampled_with or {}) | state["rollout"]))
        values["adv"] = AdvantageResult(**state["adv"])
        return cls(**values)


def check_minibatches(num_minibatches: int, rows: int, ranks: int) -> None:
    """Every rank splits its share of the rollout's `rows` into `num_minibatches` non-empty minibatches."""
    if num_minibatches > rows // ranks:
        raise ValueError(
            f"optim.num_minibatches={num_minibatches} is more than the {rows // ranks} samples of a rollout "
            f"on each of the {ranks} ranks (rollout.prompts_per_step x rollout.group_size / ranks)"
        )


def shuffled_steps(
    rows: int, epochs: int, num_minibatches: int, generator: torch.Generator, group_size: int | None = None
) -> list[torch.Tensor]:
    """Each optimizer step's row indices: `epochs` shuffles of `rows` rows, each split into `num_minibatches`
    parts whose sizes differ by at most one. With `group_size` (optim.minibatch_split=groups) the shuffle is
    of whole groups (rows `g * group_size ...` form group g), each part a set of groups.
    `[n_i]` long tensors on the CPU, in the order they run."""
    if group_size is None:
        return [
            part
            for _ in range(epochs)
            for part in torch.randperm(rows, generator=generator).tensor_split(num_minibatches)
        ]
    groups = rows // group_size
    if groups * group_size != rows or num_minibatches > groups:
        raise ValueError(
            f"optim.minibatch_split=groups: {rows} rows of groups of {group_size} cannot be split into "
            f"{num_minibatches} minibatches of whole groups"
        )
    members = torch.arange(group_size)
    return [
        (part[:, None] * group_size + members).flatten()
        for _ in range(epochs)
        for part in torch.randperm(groups, generator=generator).tensor_split(num_minibatches)
    ]


def _map_tensors(plan: UpdatePlan, fn) -> UpdatePlan:
    rollout = dataclasses.replace(
        plan.rollout,
        **{
            f.name: fn(getattr(plan.rollout, f.name))
            for f in dataclasses.fields(plan.rollout)
            if isinstance(getattr(plan.rollout, f.name), torch.Tensor)
        },
    )
    return dataclasses.replace(
        plan,
        rollout=rollout,
        rewards=fn(plan.rewards),
        per_fn={name: fn(values) for name, values in plan.per_fn.items()},
        adv=dataclasses.replace(plan.adv, advantages=fn(plan.adv.advantages)),
        old_logps=fn(plan.old_logps),
        ref_logps=None if plan.ref_logps is None else fn(plan.ref_logps),
    )
