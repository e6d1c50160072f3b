"""BAPO (Xi et al., 2025, arXiv 2510.18927): PPO's clip with bounds moved per call so that the tokens of
positive advantage carry at least a set share of the loss. Notation as in `clipped`.

The paper's algorithm could not be read here; this follows the authors' verl recipe (WooooDyy/BAPO,
`recipe/bapo/policy_loss.py`) and the bound ranges its README gives as the paper's.
"""

from __future__ import annotations

import dataclasses

import torch

from twinkle_exp.loss import metric_keys as K
from twinkle_exp.loss.batch import TokenBatch
from twinkle_exp.loss.core import LossSpec
from twinkle_exp.loss.objectives.clipped import ClippedRatioLoss
from twinkle_exp.loss.params import fraction, non_negative, param, positive
from twinkle_exp.loss.registry import register_loss

BAPO_LOW = "bapo/clip_low"  # the ratio's lower bound the search chose (a ratio, not 1 - eps)
BAPO_HIGH = "bapo/clip_high"  # the ratio's upper bound the search chose
BAPO_SHARE = "bapo/positive_share"  # the positive tokens' share of the contributions at the chosen bounds


def contributions(ratio: torch.Tensor, b: TokenBatch, low: float, high: float) -> tuple[float, float]:
    """The positive and negative tokens' summed contributions |w A|, `ratio` `[B, T]` detached, with the
    authors' weight w = min(r, high) for A >= 0 and max(r, low) for A < 0."""
    weight = torch.where(b.advantages >= 0, ratio.clamp(max=high), ratio.clamp(min=low))
    signed = weight * b.advantages * b.mask
    return float(signed.clamp(min=0).sum()), float((-signed).clamp(min=0).sum())


@register_loss
class BAPOLoss(ClippedRatioLoss):
    """BAPO: -min(r A, clip(r, c_low, c_high) A), token mean, with (c_low, c_high) searched on each call.

    The search starts at (`ratio_low_start`, `ratio_high_start`) and, while the positive share
    pos / (pos + neg) of `contributions` is below `positive_share` (the paper's rho_0), raises c_low by
    `ratio_low_step` up to `ratio_low_max`, then c_high by `ratio_high_step` up to `ratio_high_max`: the
    authors' order. Their contribution counts a negative token at max(r, c_low), so raising c_low never
    raises the share; when the target is missed at the start c_low ends at its maximum before c_high
    moves. The bounds are ratios (0.6, 1.2), not epsilons; `clip_range` / `clip_range_high` are unused.
    `clip_ratio_c` (the authors' code applies verl's default 3) and `delta` apply as for GRPO.
    """

    name = "bapo"
    advantage_linear = False  # its clip bounds are searched on each call's tokens
    aggregation = "token_mean"

    positive_share: float = param(0.5, fraction)
    ratio_low_start: float = param(0.6, positive)
    ratio_low_max: float = param(0.9, positive)
    ratio_low_step: float = param(0.05, non_negative)
    ratio_high_start: float = param(1.2, positive)
    ratio_high_max: float = param(3.0, positive)
    ratio_high_step: float = param(0.05, non_negative)

    def __post_init__(self) -> None:
        super().__post_init__()
        lo0, lo1, hi0, hi1 = (
            self.ratio_low_start,
            self.ratio_low_max,
            self.ratio_high_start,
            self.ratio_high_max,
        )
        if not (lo0 <= lo1 < 1.0 < hi0 <= hi1):
            raise ValueError(
                "BAPO's bounds must satisfy ratio_low_start <= ratio_low_max < 1 < ratio_high_start <= "
                f"ratio_high_max; got {lo0:g}, {lo1:g}, {hi0:g}, {hi1:g}"
            )

    @property
    def metric_keys(self) -> tuple[str, ...]:
        return (*super().metric_keys, BAPO_LOW, BAPO_HIGH, BAPO_SHARE)

    def _met(self, pos: float, neg: float) -> bool:
        # pos / (pos + neg) >= rho without a division: a batch with no negative contribution meets any target.
        return pos * (1.0 - self.positive_share) >= self.positive_share * neg

    def search(self, ratio: torch.Tensor, b: TokenBatch) -> tuple[float, float, float, float]:
        """(c_low, c_high, pos, neg) for this call's `[B, T]` detached ratios."""
        low, high = self.ratio_low_start, self.ratio_high_start
        pos, neg = contributions(ratio, b, low, high)
        # Bounds are start + k * step (capped), not repeated additions, so that no rounding drifts past a cap.
        k = 0
        while not self._met(pos, neg) and low < self.ratio_low_max and self.ratio_low_step > 0:
            k += 1
            low = min(self.ratio_low_start + k * self.ratio_low_step, self.ratio_low_max)
            pos, neg = contributions(ratio, b, low, high)
        k = 0
        while not self._met(pos, neg) and high < self.ratio_high_max and self.ratio_high_step > 0:
            k += 1
            high = min(self.ratio_high_start + k * self.ratio_high_step, self.ratio_high_max)
            pos, neg = contributions(ratio, b, low, high)
        return low, high, pos, neg

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        r = ratio.detach()
        low, high, pos, neg = self.search(r, b)
        moved = dataclasses.replace(spec, clip_range=1.0 - low, clip_range_high=high - 1.0)
        loss, extra = super().per_token(moved, b, ratio)
        share = pos / (pos + neg) if pos + neg > 0 else 1.0
        adv = b.advantages
        extra |= {
            K.CLIP_LOW: (r < low) & (adv < 0) & b.mask,
            K.CLIP_HIGH: (r > high) & (adv > 0) & b.mask,
            BAPO_LOW: torch.full_like(r, low),
            BAPO_HIGH: torch.full_like(r, high),
            BAPO_SHARE: torch.full_like(r, share),
        }
        return loss, extra
