"""An endless, seeded stream of prompt batches for the trainer (each item is one rollout's prompts)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

from torch.utils.data import IterableDataset

from twinkle_exp.tasks import Task


class PromptStream(IterableDataset):
    """Yields `{"prompts": [str] * n, "answers": [str] * n}` forever; each data-parallel rank draws its own.

    `start` is the index of the first rollout to yield: a resumed run passes its checkpoint's rollout count.
    The stream replays (draws and discards) the rollouts before it rather than saving its RNG state, because
    the data loader fetches one batch ahead of the training step (a saved state would be one rollout too far
    on), and replaying keeps an uninterrupted run's prompts exactly what they always were; drawing a
    rollout's prompts costs microseconds.
    """

    def __init__(self, task: Task, prompts_per_step: int, seed: int, start: int = 0) -> None:
        if prompts_per_step < 1:
            raise ValueError(f"rollout.prompts_per_step must be >= 1, got {prompts_per_step}")
        if start < 0:
            raise ValueError(f"the stream's start rollout must be >= 0, got {start}")
        self.task, self.prompts_per_step, self.seed, self.start = task, prompts_per_step, seed, start

    def __iter__(self) -> Iterator[dict[str, list[str]]]:
        rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))
        rng = random.Random(f"{self.seed}-{rank}")
        for _ in range(self.start):
            self.task.sample(self.prompts_per_step, rng)
        while True:
            examples = self.task.sample(self.prompts_per_step, rng)
            yield {"prompts": [e.prompt for e in examples], "answers": [e.answer for e in examples]}
