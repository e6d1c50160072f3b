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

# Shares of completion tokens (token-weighted like the clip ratios, so micro-batches and ranks add up):
ADV_POSITIVE = "clip_ratio/positive_adv_mean"  # tokens with A > 0
ADV_NEGATIVE = "clip_ratio/negative_adv_mean"  # tokens with A < 0
LOW_PROB_OLD = 0.2  # DAPO's "low-probability token": old probability below this (arXiv 2503.14476)
CLIP_HIGH_LOW_PROB = "clip_ratio/high_low_prob_mean"  # up-clipped (CLIP_HIGH) with old probability < 0.2
# Ratios of the shares above, taken once a step's shares are reduced (`derived_clip_metrics`); left out of
# a step where the denominator is 0:
CLIP_HIGH_GIVEN_POSITIVE = "clip_ratio/high_given_positive"  # CLIP_HIGH / ADV_POSITIVE
CLIP_LOW_GIVEN_NEGATIVE = "clip_ratio/low_given_negative"  # CLIP_LOW / ADV_NEGATIVE
LOW_PROB_GIVEN_HIGH = "clip_ratio/low_prob_given_high"  # CLIP_HIGH_LOW_PROB / CLIP_HIGH

COMMON = (
    RATIO_MEAN,
    RATIO_MIN,
    RATIO_MAX,
    CLIP_LOW,
    CLIP_HIGH,
    CLIP_REGION,
    POLICY_LOSS,
    ADV_POSITIVE,
    ADV_NEGATIVE,
    CLIP_HIGH_LOW_PROB,
)
# derived key -> (numerator, denominator), both token shares of COMMON
DERIVED = {
    CLIP_HIGH_GIVEN_POSITIVE: (CLIP_HIGH, ADV_POSITIVE),
    CLIP_LOW_GIVEN_NEGATIVE: (CLIP_LOW, ADV_NEGATIVE),
    LOW_PROB_GIVEN_HIGH: (CLIP_HIGH_LOW_PROB, CLIP_HIGH),
}
