"""The random generators a rollout draws from: the sampler's tokens and the shuffler's minibatch order.

Each rank has its own pair, seeded from the run's seed and the rank, so ranks draw different samples and
a run is a function of its seed. A resumed run sets their saved states once they exist (`start`).
"""

from __future__ import annotations

from typing import Any

import torch


class RolloutGenerators:
    """`sampler` (on the training device) and `shuffler` (on the CPU); None until `start`."""

    def __init__(self) -> None:
        self.sampler: torch.Generator | None = None
        self.shuffler: torch.Generator | None = None

    def start(self, device: torch.device, seed: int, rank: int, saved: dict[str, Any] | None = None) -> None:
        """Seed both for `rank`, or carry on from `saved` (`state_dict()` of a checkpointed run)."""
        self.sampler = torch.Generator(device=device).manual_seed(seed * 1000 + rank)
        self.shuffler = torch.Generator().manual_seed(seed * 1000 + rank)
        if saved is not None:
            self.sampler.set_state(saved["sampler"])
            self.shuffler.set_state(saved["shuffler"])

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"sampler": self.sampler.get_state(), "shuffler": self.shuffler.get_state()}
