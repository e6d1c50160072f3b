"""The pipeline's metric keys, defined once, and those of an objective the report reads (CISPO's, here so
that the report imports no torch). An objective's other keys are defined in its own module. Names follow
TRL's so dashboards compare across tools."""

RATIO_MEAN = "ratio/mean"
RATIO_MIN = "ratio/min"
RATIO_MAX = "ratio/max"
CLIP_LOW = "clip_ratio/low_mean"  # r < 1 - lo with A < 0: the lower clip binds
CLIP_HIGH = "clip_ratio/high_mean"  # r > 1 + hi with A > 0: the upper clip binds
CLIP_REGION = "clip_ratio/region_mean"  # either of the two
KL = "kl"  # token mean of the KL estimate against the reference (only when one is given)
POLICY_LOSS = "policy_loss"  # the loss without the KL term, with the same normaliser
CISPO_CLIP = "cispo/clip_ratio"  # tokens whose importance weight CISPO capped at 1 + hi
# The switches' keys (docs/losses.md), reported only by the losses that turn them on.
OFF_POLICY_MASKED = "off_policy_mask/masked_fraction"  # tokens of sequences the off-policy mask dropped
TOP_ENTROPY_KEPT = "top_entropy/kept_fraction"  # tokens at or above the entropy quantile (the trained ones)
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
