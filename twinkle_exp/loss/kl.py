"""Per-token estimators of KL(policy || reference) from log-probs of the sampled tokens (Schulman, 2020).

As values, averaged over the policy's own samples, k1 and k3 are unbiased estimates of KL(pi || ref) and
k2 is biased; the `kl` metric reports them so. As penalties the loss differentiates them at those samples
(the samples' probabilities carry no gradient), and their expected gradients are not all that KL's
(`tests/test_kl_direction.py`, exact expectations on a 6-way categorical):

- k1 = logp - ref: E_pi[grad logp] = 0, so `beta * k1` regularises nothing in expectation (it only adds
  noise), although its value looks like a KL;
- k2 = (logp - ref)^2 / 2: the gradient of KL(pi || ref), the direction the penalty's name says;
- k3 = exp(ref - logp) - (ref - logp) - 1 (the default, as in DeepSeekMath's GRPO and TRL): the gradient
  of the reverse direction, KL(ref || pi), which pushes hardest on tokens the policy makes rarer than the
  reference and is mass-covering rather than mode-seeking.
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_penalty(logps: torch.Tensor, ref_logps: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token KL estimate, `[B, T]` x `[B, T]` -> `[B, T]` (see the module doc for each gradient).

    k1 = logp - ref (unbiased, can be negative), k2 = (logp - ref)^2 / 2, k3 = exp(ref - logp) - (ref - logp) - 1
    (unbiased and never negative).
    """
    delta = ref_logps - logps
    if estimator == "k1":
        return -delta
    if estimator == "k2":
        return 0.5 * delta.square()
    if estimator == "k3":
        # The upper bound keeps exp finite: a token more than 20 nats below the reference gets k3's value at
        # 20 and no gradient. Below 0, exp underflows harmlessly and k3 keeps its gradient of ~1 (a bound
        # at -20 used to drop it); -1000 only keeps a reference that gives the token probability 0 finite.
        delta = delta.clamp(-1000.0, 20.0)
        return torch.exp(delta) - delta - 1.0
    raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")
