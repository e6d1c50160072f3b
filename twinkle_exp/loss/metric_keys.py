"""The loss library's metric keys, defined once. Names follow TRL's so dashboards compare across tools."""

RATIO_MEAN = "ratio/mean"
RATIO_MIN = "ratio/min"
RATIO_MAX = "ratio/max"
CLIP_LOW = "clip_ratio/low_mean"  # r < 1 - lo with A < 0: the lower clip binds
CLIP_HIGH = "clip_ratio/high_mean"  # r > 1 + hi with A > 0: the upper clip binds
CLIP_REGION = "clip_ratio/region_mean"  # either of the two
KL = "kl"  # token mean of the KL estimate against the reference (only when one is given)
POLICY_LOSS = "policy_loss"  # the loss without the KL term, with the same normaliser
SAPO_GATE = "sapo/gate_mean"  # SAPO's gradient weight 4 s (1 - s), s = sigmoid(tau (r - 1)); 1 on-policy
CISPO_CLIP = "cispo/clip_ratio"  # tokens whose importance weight CISPO capped at 1 + hi
# The zoo's and the switches' keys (docs/losses.md), reported only by the losses that use them.
DUAL_CLIP = "clip_ratio/dual_mean"  # A < 0 tokens whose loss the dual clip bounded at -c A
OFF_POLICY_MASKED = "off_policy_mask/masked_fraction"  # tokens of sequences the off-policy mask dropped
TOP_ENTROPY_KEPT = "top_entropy/kept_fraction"  # tokens at or above the entropy quantile (the trained ones)
CLIP_COV = "clip_cov/detached_fraction"  # tokens Clip-Cov picked and detached
KL_COV = "kl_cov/penalised_fraction"  # tokens KL-Cov picked and penalised
VESPO_PHI = "vespo/phi_seq_mean"  # VESPO's sequence weight phi(w), token mean
TOPR_WEIGHT = "topr/weight_mean"  # TOPR's weight: 1 for A > 0, clip(pi/mu, 0, 1) otherwise
KIMI_PENALTY = "kimi/penalty_mean"  # Kimi k1.5's (tau/2) log-ratio^2 term per token
# Rollout correction (loss/rollout_correction.py): the sampler-vs-trainer weights, not the loss.
ROLLOUT_RATIO_MEAN = "rollout_correction/ratio_mean"  # pi_old / pi_sampler, token mean (or sequence's)
ROLLOUT_RATIO_MIN = "rollout_correction/ratio_min"
ROLLOUT_RATIO_MAX = "rollout_correction/ratio_max"
ROLLOUT_MASKED = "rollout_correction/masked_fraction"  # tokens whose weight is 0
ROLLOUT = (ROLLOUT_RATIO_MEAN, ROLLOUT_RATIO_MIN, ROLLOUT_RATIO_MAX, ROLLOUT_MASKED)

COMMON = (RATIO_MEAN, RATIO_MIN, RATIO_MAX, CLIP_LOW, CLIP_HIGH, CLIP_REGION, POLICY_LOSS)
