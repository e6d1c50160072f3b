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
COMPLETION_CLIPPED_RATIO = (
    "train/completions/clipped_ratio"  # no EOS within max_new_tokens: the truncation rate
)
# Share of completions that repeat their prompt: runs of training.prompt_repeats.REPEAT_RUN (6) consecutive
# token ids of it (chat-template tokens included) cover REPEAT_SHARE (2/3) of their tokens, a closing EOS
# aside. A reward that rises with it may pay the question restated.
COMPLETION_REPEATS_PROMPT_RATIO = "train/completions/repeats_prompt_ratio"
# Mean completion length (tokens, EOS included) of the rollout's correct / incorrect completions, correct as
# the reward judged it (training.rollout_metrics.is_correct); absent from a rollout with none of that kind.
COMPLETION_LENGTH_CORRECT = "train/completions/mean_length_correct"
COMPLETION_LENGTH_INCORRECT = "train/completions/mean_length_incorrect"
GRAD_NORM = "train/grad_norm"  # of the unscaled gradients, before clipping
LEARNING_RATE = "train/lr"  # the rate the optimizer step used
# optim.skip_zero_advantage: the share of the optimizer step's rows left out of its forward and backward
# (advantage exactly 0); absent without the setting.
ZERO_ADVANTAGE_ROWS_SKIPPED = "train/zero_advantage_rows_skipped"
# |trainer's log-prob - sampler's| per completion token, on a rollout's first minibatch before any update:
# how far the sampler (KV-cached, maybe another precision or engine) is from the training forward.
LOGP_MISMATCH_MEAN = "train/logp_mismatch/mean"
LOGP_MISMATCH_MAX = "train/logp_mismatch/max"
# rollout.engine=vllm, over every completion token of the rollout (every rank): the importance ratio
# pi_old / pi_sampler = exp(trainer's recomputed old log-prob - the engine's), its smallest, largest and mean:
# the distribution a rollout correction (optim.rollout_correction) truncates or masks.
SAMPLER_RATIO_MIN = "train/sampler_ratio/min"
SAMPLER_RATIO_MAX = "train/sampler_ratio/max"
SAMPLER_RATIO_MEAN = "train/sampler_ratio/mean"
# Top-k / top-p only: the mean over completion tokens of the tempered softmax's mass the filter removed
# before the draw, which is each token's total variation between the distribution sampled and the one
# the old log-probs and the loss score (docs/experiment.md, "Top-k and top-p").
SAMPLER_FILTERED_MASS = "train/sampler/filtered_mass"
ROLLOUT_INDEX = "train/rollout"
# ReMax's baseline (advantage=remax): greedy completions drawn, one per prompt over every rank, not trained on.
GREEDY_BASELINE_SAMPLES = "train/greedy_baseline/samples"
# Dynamic sampling (rollout.filter_zero_variance), over every rank: the share of the first draw's groups whose
# rewards were all equal, the completions drawn beyond the rollout's (refills, used or not), the sampling
# passes beyond the first, and the zero-variance groups still in the batch when max_extra_draws ran out
# (cap_hit 1: the rollout trained on them).
DYNAMIC_DROPPED_FRACTION = "train/dynamic_sampling/dropped_fraction"
DYNAMIC_EXTRA_SAMPLES = "train/dynamic_sampling/extra_samples"
DYNAMIC_EXTRA_DRAWS = "train/dynamic_sampling/extra_draws"
DYNAMIC_ZERO_VARIANCE_LEFT = "train/dynamic_sampling/zero_variance_left"
DYNAMIC_CAP_HIT = "train/dynamic_sampling/cap_hit"
TIME_ROLLOUT = "time/rollout_s"
# rollout.engine=vllm: the seconds (the slowest rank's) and bytes of the weight pushes into the engine since the
# last rollout's metrics; 0 when the engine already held the rollout's weights (training/engine_sync.py).
TIME_ENGINE_PUSH = "time/engine_push_s"
ENGINE_PUSH_BYTES = "train/engine/push_bytes"
TIME_GREEDY_BASELINE = "time/greedy_baseline_s"  # drawing and scoring ReMax's greedy completions
TIME_DYNAMIC_SAMPLING = "time/dynamic_sampling_s"  # the refills' sampling and scoring
TIME_REFERENCE = "time/reference_s"
TIME_UPDATE = "time/update_s"
ROLLOUT_TOKENS_PER_S = "time/rollout_tokens_per_s"
UPDATE_TOKENS_PER_S = "time/update_tokens_per_s"
VAL_ACCURACY = "val/accuracy"  # greedy exact match on the held-out set
VAL_REWARD_MEAN = "val/reward_mean"
VAL_CLIPPED_RATIO = "val/clipped_ratio"  # greedy answers with no EOS within max_new_tokens
# + the answer's length in characters: val/accuracy on the held-out answers of that length (tasks with a few
# distinct lengths only), the breakdown that shows whether a plateau is the task's limit or the loss's.
VAL_ACCURACY_BY_LENGTH = "val/accuracy_by_length/"
# Sampled validation (trainer.val_samples, off by default): n completions per held-out prompt at
# val_samples.temperature. + k: the unbiased pass@k of Chen et al. 2021 (training/pass_at_k.py), the chance
# that at least one of k of the n samples is right, averaged over prompts; + n: the mean share of the n
# samples that are right (mean@n, the sampled accuracy; its expectation is pass@1 for every k, so it is
# logged once, at k = n). time/val_samples_s: the seconds the sampled validation took on this rank.
VAL_PASS_AT = "val/pass@"
VAL_MEAN_AT = "val/mean@"
TIME_VAL_SAMPLES = "time/val_samples_s"
SAMPLES_TABLE = "samples"

# The loss's metrics, as logged by the trainer.
RATIO_MEAN = TRAIN + loss_keys.RATIO_MEAN
KL = TRAIN + loss_keys.KL
CLIP_LOW = TRAIN + loss_keys.CLIP_LOW
CLIP_HIGH = TRAIN + loss_keys.CLIP_HIGH
CLIP_REGION = TRAIN + loss_keys.CLIP_REGION
CLIP_HIGH_GIVEN_POSITIVE = TRAIN + loss_keys.CLIP_HIGH_GIVEN_POSITIVE
CLIP_LOW_GIVEN_NEGATIVE = TRAIN + loss_keys.CLIP_LOW_GIVEN_NEGATIVE
LOW_PROB_GIVEN_HIGH = TRAIN + loss_keys.LOW_PROB_GIVEN_HIGH

# Optimizer steps skipped so far because a reward, advantage, log-prob, loss or gradient was not finite.
SKIPPED_STEPS = "train/skipped_steps"

# End-of-run figures, in the wandb run summary and run.json's "final" (twinkle_exp.summary.run_summary), so that
# a wandb project's table and parallel-coordinates panels can sort and compare runs without opening them.
SUMMARY_FINAL_ACCURACY = "summary/final_accuracy"  # the last val/accuracy
SUMMARY_ACCURACY_AUC = "summary/accuracy_auc"  # area under val/accuracy over the step span: mean accuracy
SUMMARY_STEPS_TO_THRESHOLD = "summary/steps_to_threshold"  # first step with val/accuracy >= the threshold
SUMMARY_THRESHOLD = "summary/threshold"
SUMMARY_WALL_TIME = "summary/wall_time_s"
SUMMARY_WARNINGS = "summary/warnings"  # ids of the diagnostics that fired (twinkle_exp.report.diagnostics)

# More of the loss's metrics as logged, read by the report's diagnostics (twinkle_exp.report.diagnostics).
RATIO_MIN = TRAIN + loss_keys.RATIO_MIN
RATIO_MAX = TRAIN + loss_keys.RATIO_MAX
CISPO_CLIP = TRAIN + loss_keys.CISPO_CLIP

# Reported by reward=math for each rollout (RewardSet.last_metrics): completions scored 0 because no
# answer could be parsed from them, and answer checks stopped by the per-answer timeout (also scored 0).
REWARD_PARSE_FAILURES = "train/rewards/parse_failures"
REWARD_CHECK_TIMEOUTS = "train/rewards/check_timeouts"
