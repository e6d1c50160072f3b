"""`StepParts`: what every stage of the RL step (`rl_step.py`) reads: the models, the rewards, the loss and
the settings. Built once per module; only the loss (`use_loss`) and the start of a fit (`start`) change it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from twinkle_exp.config.schema import (
    AdvantageConfig,
    OptimConfig,
    RolloutConfig,
    skip_zero_advantage_problem,
)
from twinkle_exp.loss import LossFn
from twinkle_exp.loss.advantages import AdvantageSettings, token_shaping
from twinkle_exp.policy.build import Policy
from twinkle_exp.policy.reference import Reference
from twinkle_exp.rewards import RewardSet
from twinkle_exp.sampling.generate import SamplingOptions
from twinkle_exp.sampling.sampler_copy import SamplerCopy
from twinkle_exp.sampling.vllm_engine import EngineSettings, VllmEngine, model_source
from twinkle_exp.training.engine_sync import EngineSync
from twinkle_exp.training.micro_loss import LossExtras
from twinkle_exp.training.old_logps import recompute_for_run
from twinkle_exp.training.rollout_metrics import TruncationWatch
from twinkle_exp.training.staleness import LaggedPolicy
from twinkle_exp.training.update_plan import check_minibatches


@dataclass
class StepParts:
    policy: torch.nn.Module
    tokenizer: Any
    rewards: RewardSet
    loss_fn: LossFn
    rollout: RolloutConfig
    advantage: AdvantageConfig
    optim: OptimConfig
    sampler_copy: SamplerCopy  # the policy, or its rollout.sampler_dtype copy, to sample from
    truncation: TruncationWatch  # warns of rollouts cut off at rollout.max_new_tokens
    lagged: LaggedPolicy  # the weights of rollout.staleness optimizer steps ago, to sample from
    load_reference: Callable[[], torch.nn.Module] | None = None  # a separate reference model's loader
    reference: Reference | None = None  # the frozen reference, when the loss has beta > 0 (use_loss)
    recompute_old_logps: bool = False  # decided when training starts (`start`)
    engine: EngineSync | None = None  # rollout.engine=vllm's engine (started on its first rollout)
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @classmethod
    def of(
        cls, policy: Policy, rewards: RewardSet, loss_fn: LossFn, rollout: RolloutConfig, advantage: AdvantageConfig,
        optim: OptimConfig,
    ) -> StepParts:  # fmt: skip
        truncation = TruncationWatch(rollout.max_new_tokens, rewards.truncated_max)
        parts = cls(
            policy.model, policy.tokenizer, rewards, loss_fn, rollout, advantage, optim,
            SamplerCopy(rollout.sampler_dtype, rollout.merge_adapters), truncation, LaggedPolicy(rollout.staleness),
            load_reference=policy.load_reference,
        )  # fmt: skip
        if rollout.engine == "vllm":
            parts.engine = EngineSync(VllmEngine(model_source(policy.model), EngineSettings.of(rollout.vllm)))
        parts.check_minibatches(ranks=1)
        parts.use_loss(loss_fn, started=False)
        return parts

    def check_minibatches(self, ranks: int) -> None:
        r = self.rollout
        check_minibatches(self.optim.num_minibatches, r.prompts_per_step * r.group_size, ranks)
        if self.optim.skip_zero_advantage and ranks > 1:
            raise ValueError(
                f"optim.skip_zero_advantage=true runs on one process, not {ranks} ranks: each rank would "
                "run its own number of passes; use optim.skip_zero_advantage=false"
            )

    def use_loss(self, loss_fn: LossFn, started: bool) -> None:
        """Train with `loss_fn` from now on; builds the reference if it needs one (not once `started`)."""
        if not isinstance(loss_fn, LossFn):
            raise ValueError(
                f"loss_fn must be a LossFn (callable, with a beta), got {type(loss_fn).__name__}"
            )
        if loss_fn.beta > 0 and self.reference is None:
            if started:
                raise ValueError("cannot switch to a loss with beta > 0 after training started: no reference")
            self.reference = Reference.of(self.policy, self.load_reference)
        problem = skip_zero_advantage_problem(
            self.optim.skip_zero_advantage, loss_fn, self.advantage.estimator
        )
        if problem is not None:
            raise ValueError(problem)
        self.loss_fn = loss_fn

    def start(self, device: torch.device, precision: str) -> None:
        """When training starts on `device` under Lightning's `precision`: the reference moves there, and
        whether the old log-probs are recomputed is decided (warning of settings whose ratios are not 1)."""
        if self.reference is not None:
            self.reference.to(device)
        self.device = device
        o = self.optim
        self.recompute_old_logps = recompute_for_run(
            o.old_logps, precision, self.policy, o.rollout_correction.mode, self.rollout.sampler_dtype,
            o.update_dropout, engine=self.rollout.engine,
        )  # fmt: skip


def sampling_options(rollout: RolloutConfig) -> SamplingOptions:
    """How a rollout is drawn; the rollout then carries its temperature and filters (`RolloutBatch`)."""
    r = rollout
    return SamplingOptions(r.max_new_tokens, r.group_size, r.temperature, r.top_k, r.top_p)


def sampled_with(rollout: RolloutConfig) -> dict[str, Any]:
    """`RolloutBatch`'s sampling fields under `rollout`'s settings (for rollouts saved without them)."""
    return {"temperature": rollout.temperature, "top_k": rollout.top_k, "top_p": rollout.top_p}


def advantage_settings(advantage: AdvantageConfig) -> AdvantageSettings:
    """The `advantage` config's fields that the estimators read."""
    a = advantage
    return AdvantageSettings(
        scale=a.scale, eps=a.eps, positive_weight=a.positive_weight, entropy_alpha=a.entropy_alpha,
        entropy_kappa=a.entropy_kappa,
    )  # fmt: skip


def loss_extras(parts: StepParts) -> LossExtras:
    """The rollout correction and per-token advantages every loss call of the run is given."""
    a = parts.advantage
    return LossExtras(parts.optim.rollout_correction, token_shaping(a.estimator, advantage_settings(a)))
