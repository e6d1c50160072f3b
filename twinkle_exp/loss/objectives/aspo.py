"""ASPO (Wang et al., 2025, arXiv 2510.06062): the importance ratio of positive-advantage tokens flipped, so
that a token the policy already favours is weighted down rather than up, with a soft dual clip. Notation as
in `clipped`.

The paper could not be read here beyond its abstract; the form follows the authors' code (wizard-III
Archer2.0, `compute_policy_loss_archer` in `verl/trainer/ppo/core_algos.py`).
"""

from __future__ import annotations

import torch

from twinkle_exp.loss.base import PolicyGradientLoss
from twinkle_exp.loss.batch import TokenBatch
from twinkle_exp.loss.core import LossSpec
from twinkle_exp.loss.params import greater_than, param
from twinkle_exp.loss.registry import register_loss

ASPO_DUAL = "aspo/dual_clip_mean"  # tokens on the soft dual clip's branch -c A logp (either sign of A)


@register_loss
class ASPOLoss(PolicyGradientLoss):
    """ASPO, per token, token mean:

    A >= 0: `-A r_c / sg(r_c)^2` with r_c = min(r, 1 + hi): its value is -A / r_c and its gradient the
    flipped weight 1 / r on -A grad logp (none where r > 1 + hi); where 1 / r_c > c, `-A c logp`.
    A < 0: `-A max(r, 1 - lo)` (PPO's clip); where that weight exceeds c, `-A c logp`.

    The soft dual clip keeps a gradient of weight c where a hard dual clip would leave none. c is
    `dual_clip_c` (3 as the authors'). Their run also widens both clips to 0.4 for tokens above each
    sequence's 80% entropy quantile; that split is not reproduced here (0.2 for every token).
    """

    name = "aspo"
    advantage_linear = True
    aggregation = "token_mean"
    metric_keys = (ASPO_DUAL,)

    dual_clip_c: float = param(3.0, greater_than(1.0))

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        adv = b.advantages
        capped = ratio.clamp(max=1.0 + spec.clip_range_high)
        capped_sg = capped.detach()
        positive = -adv * capped / capped_sg.square()
        floored = ratio.clamp(min=1.0 - spec.clip_range)
        negative = -adv * floored
        c = self.dual_clip_c
        dual = torch.where(adv < 0, floored.detach() > c, 1.0 / capped_sg > c) & b.mask
        soft = -adv * c * b.logps
        loss = torch.where(dual, soft, torch.where(adv < 0, negative, positive))
        return loss, {ASPO_DUAL: dual}
