"""`rollout.staleness=k`: sample with the policy of k optimizer steps ago, as an asynchronous trainer does.

verl, prime-rl, AReaL and slime train while the next rollouts are drawn, so a rollout comes from weights one
or more optimizer steps behind the ones it updates. One process makes the same lag with a ring of the k
last pre-step copies of the trainable parameters (with LoRA: the adapters; the frozen base never changes):
for a rollout, and for the recomputed old log-probs of it, the oldest copy is put into the policy and the
current weights are put back afterwards, bit for bit. So the loss's old log-probs are the lagged policy's
(the behaviour policy's, as in those trainers) and its ratios measure the lag. Before the run has taken k
steps the lag is the steps taken: the first rollouts come from the initial weights.

k = 0 keeps no copy and changes nothing. The ring is part of a checkpoint (`state_dict`), so a resumed run
samples from the weights the uninterrupted one would have; a resume that changes k is refused
(`lifecycle.resume`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

CHECKPOINT_KEY = "twinkle_lagged_policy"  # the ring's entry in a Lightning checkpoint (k > 0 only)


@dataclass
class Snapshot:
    step: int  # optimizer steps taken when these were the weights
    weights: dict[str, torch.Tensor]  # {parameter name: detached copy}, the trainable parameters only


def _trainable(policy: nn.Module) -> dict[str, nn.Parameter]:
    return {name: p for name, p in policy.named_parameters() if p.requires_grad}


class LaggedPolicy:
    """The ring of the last `staleness` pre-step weights of a policy, and the swap that samples from them."""

    def __init__(self, staleness: int) -> None:
        if not isinstance(staleness, int) or isinstance(staleness, bool) or staleness < 0:
            raise ValueError(f"rollout.staleness must be an integer >= 0, got {staleness!r}")
        self.staleness = staleness
        self.ring: deque[Snapshot] = deque(maxlen=max(staleness, 1))

    @torch.no_grad()
    def before_step(self, policy: nn.Module, steps_done: int) -> None:
        """Keep `policy`'s weights as they are before optimizer step `steps_done + 1` (k = 0: nothing)."""
        if self.staleness == 0:
            return
        copies = {name: p.detach().clone() for name, p in _trainable(policy).items()}
        self.ring.append(Snapshot(steps_done, copies))

    def lag(self, steps_done: int) -> int:
        """How many optimizer steps behind `steps_done` the weights that `weights` puts in are."""
        return 0 if not self.ring else steps_done - self.ring[0].step

    @contextmanager
    def weights(self, policy: nn.Module) -> Iterator[nn.Module]:
        """`policy` holding the oldest kept weights while inside, its own again after (an empty ring, k = 0
        or no step taken yet: `policy` as it is). Swaps the parameters' storage: nothing is copied."""
        if not self.ring:
            yield policy
            return
        params, old = _trainable(policy), self.ring[0].weights
        if params.keys() != old.keys():
            raise RuntimeError(
                "rollout.staleness: the policy's trainable parameters are not the ones the lagged copies "
                f"were taken of ({sorted(set(params) ^ set(old))[:3]} differ)"
            )
        own = {name: p.data for name, p in params.items()}
        try:
            for name, p in params.items():
                if old[name].device != p.device:  # restored from a checkpoint onto the CPU
                    old[name] = old[name].to(p.device)
                p.data = old[name]
            yield policy
        finally:
            for name, p in params.items():
                p.data = own[name]

    def state_dict(self) -> dict[str, Any]:
        """Plain containers and CPU tensors, for a checkpoint."""
        return {
            "staleness": self.staleness,
            "ring": [
                {"step": s.step, "weights": {k: v.detach().cpu() for k, v in s.weights.items()}}
                for s in self.ring
            ],
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Take back `state_dict()` (None: the checkpoint has no ring, which only k = 0 may resume from)."""
        saved = 0 if state is None else int(state["staleness"])
        if saved != self.staleness:
            raise ValueError(
                f"resume refused: the checkpoint was trained with rollout.staleness={saved} and this run has "
                f"rollout.staleness={self.staleness}; its lagged weights cannot be rebuilt. Resume with "
                f"rollout.staleness={saved}, or start a new run directory"
            )
        self.ring.clear()
        for entry in [] if state is None else state["ring"]:
            self.ring.append(Snapshot(int(entry["step"]), dict(entry["weights"])))
