"""Every metric key the trainer logs, defined once (the loss's own keys live in twinkle_exp.loss.metric_keys)."""

from twinkle_exp.loss import metric_keys as loss_keys

TRAIN = "train/"
REWARD_MEAN = "train/reward_mean"
REWARD_STD = "train/reward_std"
REWARD_PREFIX = "train/rewards/"  # + reward function name: its unweighted mean
FRAC_REWARD_ZERO_STD = "train/frac_reward_zero_std"
ADVANTAGE_MEAN = "train/advantage_mean"
ADVANTAGE_STD = "train/advantage_std"
ADVANTAGE_ABS_MEAN = "train/advantage_abs_mean"
LOSS = "train/loss"
ENTROPY = "train/entropy"
COMPLETION_MEAN_LENGTH = "train/completions/mean_length"
COMPLETION_CLIPPED_RATIO = "train/completions/clipped_ratio"  # no EOS within max_new_tokens
GRAD_NORM = "train/grad_norm"  # of the unscaled gradients, before clipping
LEARNING_RATE = "train/lr"  # the rate the optimizer step used
# |trainer's log-prob - sampler's| per completion token, on a rollout's first minibatch before any update:
# how far the sampler (KV-cached, maybe another precision or engine) is from the training forward.
LOGP_MISMATCH_MEAN = "train/logp_mismatch/mean"
LOGP_MISMATCH_MAX = "train/logp_mismatch/max"
ROLLOUT_INDEX = "train/rollout"
TIME_ROLLOUT = "time/rollout_s"
TIME_REFERENCE = "time/reference_s"
TIME_UPDATE = "time/update_s"
ROLLOUT_TOKENS_PER_S = "time/rollout_tokens_per_s"
UPDATE_TOKENS_PER_S = "time/update_tokens_per_s"
VAL_ACCURACY = "val/accuracy"  # greedy exact match on the held-out set
VAL_REWARD_MEAN = "val/reward_mean"
SAMPLES_TABLE = "samples"

# The loss's metrics, as logged by the trainer.
RATIO_MEAN = TRAIN + loss_keys.RATIO_MEAN
KL = TRAIN + loss_keys.KL
CLIP_LOW = TRAIN + loss_keys.CLIP_LOW
CLIP_HIGH = TRAIN + loss_keys.CLIP_HIGH
CLIP_REGION = TRAIN + loss_keys.CLIP_REGION

# Optimizer steps skipped so far because a reward, advantage, log-prob, loss or gradient was not finite.
SKIPPED_STEPS = "train/skipped_steps"
