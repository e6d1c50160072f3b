"""An endless, seeded stream of prompt batches for the trainer (each item is one rollout's prompts)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

from torch.utils.data import IterableDataset

from twinkle_exp.tasks import Task


class PromptStream(IterableDataset):
    """Yields `{"prompts": [str] * n, "answers": [str] * n}` forever; each data-parallel rank draws its own."""

    def __init__(self, task: Task, prompts_per_step: int, seed: int) -> None:
        if prompts_per_step < 1:
            raise ValueError(f"rollout.prompts_per_step must be >= 1, got {prompts_per_step}")
        self.task, self.prompts_per_step, self.seed = task, prompts_per_step, seed

    def __iter__(self) -> Iterator[dict[str, list[str]]]:
        rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0)))
        rng = random.Random(f"{self.seed}-{rank}")
        while True:
            examples = self.task.sample(self.prompts_per_step, rng)
            yield {"prompts": [e.prompt for e in examples], "answers": [e.answer for e in examples]}
