"""Training: the LightningModule, the update plan and step, step and rollout metrics, old log-probs,
held-out evaluation and the warm-start."""
