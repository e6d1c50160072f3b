"""CE-GPPO (Su et al., 2025, arXiv 2509.20712): GPPO with its own coefficient on each side's clipped
gradient, to steer entropy. Notation as in `clipped`.

The paper could not be read here beyond its abstract; the form follows the authors' code
(`compute_gppo_loss_general_beta` in the Kwai-Klear/CE-GPPO README) and their 7B script's settings.
"""

from __future__ import annotations

from twinkle_exp.loss.objectives.gppo import GPPOLoss
from twinkle_exp.loss.params import non_negative, optional, param, positive
from twinkle_exp.loss.registry import register_loss


@register_loss
class CEGPPOLoss(GPPOLoss):
    """CE-GPPO: `gradient_preserving_clip` with beta1 on the tokens clipped below (r < 1 - lo, A < 0) and
    beta2 on those clipped above (r > 1 + hi, A > 0); each scales the clipped token's value too. In the
    authors' account the first side's gradient lowers the entropy and the second's raises it, so
    beta1 < beta2 leans towards exploration. beta1 / beta2 are not the KL coefficient `beta`. Defaults
    0.75 / 1 and clip 0.2 / 0.2 as the authors' 7B script (their 1.5B one: beta1 0.5); token mean.
    """

    name = "ce_gppo"

    clip_range_high: float | None = param(None, optional(positive))
    beta1: float = param(0.75, non_negative)
    beta2: float = param(1.0, non_negative)

    def coefficients(self) -> tuple[float, float]:
        return self.beta1, self.beta2
