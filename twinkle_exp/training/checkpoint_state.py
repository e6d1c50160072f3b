"""What `PolicyModule` puts in a checkpoint, and how it takes it back.

Counters (rollouts done, the warm-start and latest validation, the non-finite streak) are the same on every
rank; the random states and the rollout in progress are each rank's own, gathered into one list. They are
given back in three places, each where the uninterrupted run would next use them: counters and the plan
when Lightning loads the checkpoint, the sampler's and shuffler's states once `on_fit_start` has made the
generators, and the process-wide states at the first training step (the data loader draws its seed from
torch's generator in between, which the uninterrupted run did not).
"""

from __future__ import annotations

from typing import Any

from twinkle_exp.lifecycle import rng_state
from twinkle_exp.training.update_plan import UpdatePlan

KEY = "twinkle_module"


def capture(module: Any) -> dict[str, Any]:
    """The module's entry of a checkpoint (a collective under DDP: every rank saves together)."""
    own = {
        **module.generators.state_dict(),
        "global_rng": rng_state.capture_global(),
        "pending": None if module.pending is None else module.pending.state_dict(),
    }
    return {
        "rollouts_done": module.rollouts_done,
        "first_val": module.validation.first,
        "last_val": module.validation.last,
        "nonfinite": module.nonfinite.state_dict(),
        "per_rank": rng_state.gather_per_rank(own),
    }


def restore(module: Any, state: dict[str, Any], rank: int, world_size: int) -> dict[str, Any]:
    """Put back the counters and this rank's plan; returns this rank's random states, to apply later."""
    module.rollouts_done = state["rollouts_done"]
    module.validation.first, module.validation.last = state["first_val"], state["last_val"]
    module.nonfinite.load_state_dict(state["nonfinite"])
    own = rng_state.own_rank_state(state["per_rank"], rank, world_size, "the checkpoint")
    module.pending = None if own["pending"] is None else UpdatePlan.from_state_dict(own["pending"])
    return {key: own[key] for key in ("sampler", "shuffler", "global_rng")}
