"""An endless, seeded stream of prompt batches for the trainer (each item is one rollout's prompts)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from torch.utils.data import IterableDataset

from twinkle_exp.tasks import Task


class PromptStream(IterableDataset):
    """Yields `{"prompts": [str] * n, "answers": [str] * n}` forever, `n = prompts_per_rank`.

    `rank` is the global data-parallel rank (Lightning's `trainer.global_rank`, which counts the nodes too):
    every rank draws its own prompts, and a run is reproducible for a given number of ranks.

    `start` is the index of the first rollout to yield: a resumed run passes its checkpoint's rollout count.
    The stream replays (draws and discards) the rollouts before it rather than saving its RNG state, because
    the data loader fetches one batch ahead of the training step (a saved state would be one rollout too far
    on), and replaying keeps an uninterrupted run's prompts exactly what they always were; drawing a
    rollout's prompts costs microseconds.
    """

    def __init__(self, task: Task, prompts_per_rank: int, seed: int, rank: int = 0, start: int = 0) -> None:
        if prompts_per_rank < 1:
            raise ValueError(f"need at least one prompt per rank and rollout, got {prompts_per_rank}")
        if start < 0:
            raise ValueError(f"the stream's start rollout must be >= 0, got {start}")
        self.task, self.prompts_per_rank, self.seed, self.rank = task, prompts_per_rank, seed, rank
        self.start = start

    def __iter__(self) -> Iterator[dict[str, list[str]]]:
        rng = random.Random(f"{self.seed}-{self.rank}")
        for _ in range(self.start):
            self.task.sample(self.prompts_per_rank, rng)
        while True:
            examples = self.task.sample(self.prompts_per_rank, rng)
            yield {"prompts": [e.prompt for e in examples], "answers": [e.answer for e in examples]}


def prompts_per_rank(prompts_per_step: int, ranks: int) -> int:
    """Each rank's share of `rollout.prompts_per_step`, the global number of prompts in a rollout."""
    if prompts_per_step < 1 or prompts_per_step % ranks:
        raise ValueError(
            f"rollout.prompts_per_step={prompts_per_step} must be a positive multiple of the {ranks} "
            f"data-parallel ranks (trainer.devices x trainer.num_nodes): it is the global batch, split "
            f"evenly so that every rank holds whole groups"
        )
    return prompts_per_step // ranks


class FreshPrompts:
    """Prompts for dynamic sampling's refills (`training/dynamic_sampling.py`) of one rollout, from a stream
    of their own, seeded by the run's seed, the rank and the rollout's index: the main stream stays what it
    is with the switch on or off, and a resumed run that redraws a rollout gets the same refills."""

    def __init__(self, task: Task, seed: int, rank: int, rollout: int) -> None:
        self.task = task
        self.rng = random.Random(f"{seed}-{rank}-refill-{rollout}")

    def __call__(self, n: int) -> dict[str, list[str]]:
        examples = self.task.sample(n, self.rng)
        return {"prompts": [e.prompt for e in examples], "answers": [e.answer for e in examples]}
