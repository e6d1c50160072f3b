"""A reward that ignores the completion: 1 with probability `probability`, else 0 (Shao et al. 2025,
"Spurious Rewards", arXiv 2506.10947, their "random" reward at gamma = 0.5).

A negative control: its expected policy gradient is zero, so what a run learns under it comes from the
objective's own biases (the paper's: the clip, once updates are off-policy), not from the task. Each call
draws from its own stream, `np.random.default_rng([seed, calls so far])`, so a run is reproducible and the
training's random streams are untouched. The stream restarts on resume and also advances at validations
(which score their completions too); val/accuracy is exact match regardless (this is no verdict).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class RandomReward:
    probability: float = 0.5
    seed: int = 0
    calls: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"random reward: probability must lie in [0, 1], got {self.probability}")

    def __call__(self, prompts: list[str], completions: list[str], answers: list[str]) -> list[float]:
        rng = np.random.default_rng([self.seed, self.calls])
        self.calls += 1
        return (rng.random(len(completions)) < self.probability).astype(float).tolist()


def random_reward(probability: float = 0.5, seed: int = 0) -> RandomReward:
    """Factory for `RandomReward` (a Hydra `_target_` with keyword arguments)."""
    return RandomReward(probability=probability, seed=seed)
