"""Overlong reward shaping (DAPO, arXiv 2503.14476, section 3.4 "soft overlong punishment"): a completion that
runs into the last `buffer` tokens of the sampler's budget loses reward in proportion to how far it went,

    penalty(L) = -penalty * min(max(L - (max_tokens - buffer), 0) / buffer, 1)

with L its tokens, EOS included, as verl's DAPO reward manager computes it (`overlong_buffer.len`,
`overlong_buffer.penalty_factor`). The sampler stops at `max_tokens`, so L never exceeds it: a completion
cut off there gets the full `-penalty`. The penalty is added after `reward.truncated_max` caps a cut-off
completion's score, so a cut-off completion scores at most truncated_max - penalty.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class OverlongShaping:
    max_tokens: int  # the sampler's budget, rollout.max_new_tokens
    buffer: int  # reward.overlong_buffer: how many tokens before the budget the penalty starts
    penalty: float  # reward.overlong_penalty: the penalty at the budget

    def __post_init__(self) -> None:
        if not 0 < self.buffer <= self.max_tokens:
            raise ValueError(f"overlong buffer must be in 1..{self.max_tokens} tokens, got {self.buffer}")
        if not self.penalty >= 0:
            raise ValueError(f"overlong penalty must be >= 0, got {self.penalty}")

    def __call__(self, lengths: torch.Tensor) -> torch.Tensor:
        """lengths `[N]` completion tokens -> `[N]` float64 penalties, <= 0."""
        exceed = (lengths.to(torch.float64) - (self.max_tokens - self.buffer)).clamp(min=0.0)
        return -self.penalty * (exceed / self.buffer).clamp(max=1.0)
