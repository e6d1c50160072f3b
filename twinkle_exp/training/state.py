"""`TrainingState`: what a run carries from one optimizer step to the next, checkpointed as a whole.

Counters (rollouts done, the warm-start's and the latest validation, the non-finite streak) are the same on
every rank; the random states and the rollout in progress are each rank's own, gathered into one list. The
checkpoint's entry keeps the layout it has had since checkpoints held a pending rollout, so older
checkpoints resume. The saved states are given back in three places, each where the uninterrupted run
would next use them: counters and the plan when Lightning loads the checkpoint, the sampler's and
shuffler's states once the fit starts (`start`), the process-wide states at the first training step
(`resume_randomness`: the data loader draws its seed from torch's generator in between, which the
uninterrupted run did not).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from twinkle_exp.lifecycle import rng_state
from twinkle_exp.lifecycle.nonfinite import NonFiniteGuard
from twinkle_exp.training.generators import RolloutGenerators
from twinkle_exp.training.update_plan import UpdatePlan
from twinkle_exp.training.validation import ValidationRecord

KEY = "twinkle_module"  # the state's entry in a Lightning checkpoint


@dataclass
class TrainingState:
    nonfinite: NonFiniteGuard  # the non-finite steps' streak and count
    generators: RolloutGenerators = field(default_factory=RolloutGenerators)  # the sampler's, the shuffler's
    rollouts_done: int = 0
    validation: ValidationRecord = field(default_factory=ValidationRecord)
    pending: UpdatePlan | None = None  # the rollout whose optimizer steps are not all done
    restored: dict[str, Any] | None = None  # this rank's saved random states, until they are put back

    def start(self, device: torch.device, seed: int, rank: int) -> None:
        """When the fit starts: the generators (seeded, or as saved) and a restored plan on `device`."""
        self.generators.start(device, seed, rank, self.restored)
        if self.pending is not None:  # restored from a checkpoint onto the CPU
            self.pending = self.pending.to(device)

    def resume_randomness(self) -> None:
        """At the first training step after a resume: carry on with the saved process-wide random states."""
        if self.restored is not None:
            rng_state.restore_global(self.restored["global_rng"])
            self.restored = None

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint's entry (a collective under DDP: every rank saves together)."""
        own = {
            **self.generators.state_dict(),
            "global_rng": rng_state.capture_global(),
            "pending": None if self.pending is None else self.pending.state_dict(),
        }
        return {
            "rollouts_done": self.rollouts_done,
            "first_val": self.validation.first,
            "last_val": self.validation.last,
            "nonfinite": self.nonfinite.state_dict(),
            "per_rank": rng_state.gather_per_rank(own),
        }

    def load_state_dict(
        self, state: dict[str, Any], rank: int, world_size: int, sampled_with: dict[str, Any]
    ) -> None:
        """Take back `state_dict()`'s entry on `rank`; `sampled_with` ({temperature, top_k, top_p}, the run's
        settings) completes a pending rollout saved before rollouts carried them."""
        self.rollouts_done = state["rollouts_done"]
        self.validation.first, self.validation.last = state["first_val"], state["last_val"]
        self.nonfinite.load_state_dict(state["nonfinite"])
        own = rng_state.own_rank_state(state["per_rank"], rank, world_size, "the checkpoint")
        saved = own["pending"]
        self.pending = None if saved is None else UpdatePlan.from_state_dict(saved, sampled_with)
        self.restored = {key: own[key] for key in ("sampler", "shuffler", "global_rng")}
