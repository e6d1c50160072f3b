"""Settings that run but bend what the metrics mean: one line each, logged at start-up, never refused."""

from __future__ import annotations

from typing import Any

from twinkle_exp.config.schema import Config


def kl_caveat(loss: Any) -> str | None:
    """k1 with beta > 0: its expected gradient is 0 (`loss/kl.py`), while its `kl` metric looks plausible."""
    beta = loss.get("beta")
    if loss.get("kl_estimator") == "k1" and isinstance(beta, (int, float)) and beta > 0:
        return (
            f"loss.kl_estimator=k1 with loss.beta={beta}: k1's expected gradient is 0, so the KL penalty "
            "regularises nothing (its kl metric still looks like a KL); use k3 (the default) or k2"
        )
    return None


def config_caveats(config: Config) -> list[str]:
    """The caveats of a checked config, one line each."""
    lines = [kl_caveat(config.loss or {})]
    r = config.rollout
    if r.top_k > 0 or r.top_p < 1.0:
        lines.append(
            f"rollout.top_k={r.top_k} rollout.top_p={r.top_p:g}: tokens are drawn from the filtered softmax, "
            "but the old log-probs and the loss score the full one, so the update treats them as on-policy "
            "samples of it; train/sampler/filtered_mass logs the gap (docs/experiment.md, 'Top-k and top-p')"
        )
    return [line for line in lines if line]
