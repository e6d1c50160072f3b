"""The task interface: prompts with verifiable gold answers, and a fixed held-out validation set.

A task answers two questions for the training loop: "give me n training prompts" (`sample`) and "which
prompts do I measure accuracy on" (`validation_set`). The two never share a prompt, so validation accuracy
measures generalisation rather than memorisation.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    prompt: str  # text the policy sees, e.g. "12+345="
    answer: str  # the verifiable gold answer, e.g. "357"
    # What the supervised warm-start imitates when it is not the answer alone (a scratchpad task's free text,
    # separator and answer); None: the answer.
    demonstration: str | None = None


class Task(ABC):
    """A source of training prompts plus a fixed, disjoint validation set."""

    name: str
    # The prompt format: wrap prompts in the policy tokenizer's chat template (after a system turn of
    # `system_prompt` when set). Tasks for instruction-tuned models take both as constructor arguments.
    chat_template: bool = False
    system_prompt: str | None = None

    @abstractmethod
    def sample(self, n: int, rng: random.Random) -> list[Example]:
        """`n` training examples drawn with `rng`; never a prompt of `validation_set()`."""

    @abstractmethod
    def validation_set(self) -> list[Example]:
        """The held-out examples: identical on every call and every machine for the same constructor args."""

    def completion_answer(self, completion: str) -> str:
        """The part of a completion that greedy validation compares with the gold answer: all of it, unless
        the task's completions carry free text before the answer (`ScratchpadTask`)."""
        return completion

    def data_files(self) -> list[str]:
        """Files the examples are read from; their content is part of the warm-start's cache key."""
        return []

    def located_examples(self) -> list[tuple[Example, str]]:
        """Every example the task can train or validate on, each with where it comes from (file and line).

        For the start-up checks, whose lines name the file and row of a bad example. A procedural task's
        space is too large to list: its held-out set and a few hundred draws cover its lengths.
        """
        drawn = self.validation_set() + self.sample(512, random.Random(0))
        return [(ex, f"task prompt {ex.prompt!r}") for ex in drawn]


def check_printable_ascii(text: str, what: str) -> None:
    """Raise unless `text` is non-empty printable ASCII without whitespace.

    The built-in policy uses a character tokenizer over printable ASCII, and the reward functions strip
    whitespace before comparing, so whitespace inside a task's symbols would be silently lost.
    """
    bad = [c for c in text if not (c.isascii() and c.isprintable()) or c.isspace()]
    if not text or bad:
        raise ValueError(f"{what} must be non-empty printable ASCII without whitespace, got {text!r}")


HELD_OUT_PARTS = ("all", "tuning", "verdict")


@dataclass(kw_only=True, eq=False)
class ProceduralTask(Task):
    """A task whose examples are generated from a seeded RNG over a finite space of prompts.

    Subclasses are keyword-only dataclasses: their fields are their parameters (and the config schema of
    their `conf/task` option). They check their own fields in `check`, give the size of the prompt space and
    a way to draw one example; this class draws the validation set once (from `random.Random(seed)`, which
    is the same on every platform) and rejects those prompts when sampling training examples.
    """

    seed: int = 0  # fixes the held-out set, the same for every RL seed
    num_validation: int = 128
    # Which part of the held-out set validation scores: "all"; "tuning" (its first `tuning_share`, drawn in
    # random order, so a random part) to choose settings on; "verdict" (the rest) for the runs whose
    # verdicts count, so that no setting is chosen on the prompts that judge it. Training never sees any
    # part: every held-out prompt stays out of the training draws whichever part is scored.
    held_out_part: str = "all"
    tuning_share: float = 0.5

    def __post_init__(self) -> None:
        self.check()
        if self.num_validation < 1:
            raise ValueError(f"num_validation must be >= 1, got {self.num_validation}")
        space = self.num_prompts()
        # Strictly more than num_validation: at least one prompt must be left over for training.
        if space <= self.num_validation:
            raise ValueError(
                f"{type(self).__name__} has only {space} distinct prompts; cannot hold out "
                f"num_validation={self.num_validation} and still train. Lower num_validation or enlarge the task."
            )
        if self.held_out_part not in HELD_OUT_PARTS:
            raise ValueError(f"held_out_part must be one of {HELD_OUT_PARTS}, got {self.held_out_part!r}")
        drawn = self._draw_validation()
        tuning = round(self.tuning_share * len(drawn))
        if self.held_out_part != "all" and not 1 <= tuning < len(drawn):
            raise ValueError(
                f"tuning_share={self.tuning_share} leaves an empty part of the {len(drawn)} held-out prompts"
            )
        self._validation_prompts = frozenset(ex.prompt for ex in drawn)  # training avoids every part
        parts = {"all": drawn, "tuning": drawn[:tuning], "verdict": drawn[tuning:]}
        self._validation = parts[self.held_out_part]

    def check(self) -> None:
        """Raise ValueError naming a field whose value the task cannot use."""

    @abstractmethod
    def num_prompts(self) -> int:
        """How many distinct prompts this task can produce (its constructor args must already be set)."""

    @abstractmethod
    def random_example(self, rng: random.Random) -> Example:
        """One example drawn with `rng`; every prompt of the space must have a non-zero probability."""

    def _draw_validation(self) -> list[Example]:
        rng = random.Random(self.seed)
        seen: dict[str, Example] = {}
        while len(seen) < self.num_validation:
            ex = self.random_example(rng)
            seen.setdefault(ex.prompt, ex)
        return list(seen.values())

    def validation_set(self) -> list[Example]:
        return list(self._validation)  # a copy: callers may shuffle or truncate theirs

    def sample(self, n: int, rng: random.Random) -> list[Example]:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        out: list[Example] = []
        while len(out) < n:
            # Rejection keeps the training distribution the task's own, restricted to non-validation prompts.
            ex = self.random_example(rng)
            if ex.prompt not in self._validation_prompts:
                out.append(ex)
        return out


def check_length_range(min_len: int, max_len: int, what: str) -> None:
    if min_len < 1 or max_len < min_len:
        raise ValueError(
            f"need 1 <= min_{what} <= max_{what}, got min_{what}={min_len}, max_{what}={max_len}"
        )
