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

COMMON = (RATIO_MEAN, RATIO_MIN, RATIO_MAX, CLIP_LOW, CLIP_HIGH, CLIP_REGION, POLICY_LOSS)
