"""Per-token estimators of KL(policy || reference) from log-probs of the sampled tokens (Schulman, 2020)."""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_penalty(logps: torch.Tensor, ref_logps: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token KL estimate, `[B, T]` x `[B, T]` -> `[B, T]`.

    k1 = logp - ref (unbiased, can be negative), k2 = (logp - ref)^2 / 2, k3 = exp(ref - logp) - (ref - logp) - 1
    (unbiased and never negative).
    """
    delta = ref_logps - logps
    if estimator == "k1":
        return -delta
    if estimator == "k2":
        return 0.5 * delta.square()
    if estimator == "k3":
        # The clamp keeps exp finite when the policy has moved far from the reference; k3 stays >= 0.
        delta = delta.clamp(-20.0, 20.0)
        return torch.exp(delta) - delta - 1.0
    raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")
