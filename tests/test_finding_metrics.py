"""The metrics the published findings are read by, on batches built by hand (issue 20, item 2)."""

from __future__ import annotations

import math

import pytest
import torch

from twinkle_exp import metric_names as M
from twinkle_exp.loss import GRPOLoss, derived_clip_metrics
from twinkle_exp.loss import metric_keys as K
from twinkle_exp.tasks import Example
from twinkle_exp.training.evaluation import MAX_LENGTH_BUCKETS, length_buckets, validation_metrics
from twinkle_exp.training.rollout_metrics import RolloutRows, is_correct, length_by_correctness
from twinkle_exp.training.step_metrics import StepMetrics

IGN = -100


def _rows(rewards, lengths, truncated=None):
    n = len(rewards)
    return RolloutRows(
        rewards=torch.tensor(rewards),
        per_fn={},
        lengths=torch.tensor(lengths),
        truncated=torch.tensor(truncated or [False] * n),
    )


def test_length_by_correctness_splits_by_the_rewards_verdict():
    # correct (reward >= 1): lengths 3 and 7 -> 5; incorrect (0, 0.5 partial credit, -0.2): 5, 9, 4 -> 6
    rows = _rows([1.0, 0.0, 1.0, 0.5, -0.2], [3, 5, 7, 9, 4])
    assert is_correct(rows.rewards).tolist() == [True, False, True, False, False]
    assert length_by_correctness(rows) == {
        M.COMPLETION_LENGTH_CORRECT: 5.0,
        M.COMPLETION_LENGTH_INCORRECT: 6.0,
    }


def test_a_rollout_without_correct_completions_has_no_correct_length_rather_than_nan():
    assert length_by_correctness(_rows([0.0, 0.0], [2, 4])) == {M.COMPLETION_LENGTH_INCORRECT: 3.0}


def _four_token_batch():
    """One completion token per sequence, old log-prob `old`, ratio r = exp(logp - old):

    seq 0: A = +1, r = 1.5 (up-clipped at 0.2), old prob 0.1 (< 0.2: a low-probability token)
    seq 1: A = +1, r = 1.0
    seq 2: A = -1, r = 0.5 (down-clipped)
    seq 3: A = -1, r = 1.0
    """
    old = torch.tensor(
        [[0.0, math.log(0.1)], [0.0, math.log(0.5)], [0.0, math.log(0.5)], [0.0, math.log(0.5)]]
    )
    ratios = torch.tensor([1.5, 1.0, 0.5, 1.0])
    logps = old.clone()
    logps[:, 1] += ratios.log()
    labels = torch.tensor([[IGN, 5]] * 4)
    return logps.requires_grad_(True), labels, torch.tensor([1.0, 1.0, -1.0, -1.0]), old


def test_clip_fraction_per_sign_and_low_probability_share_of_the_up_clipped():
    logps, labels, adv, old = _four_token_batch()
    out = GRPOLoss(clip_range=0.2)(logps=logps, labels=labels, advantages=adv, old_logps=old)
    m = {k: float(v) for k, v in out.metrics.items()}
    assert m[K.ADV_POSITIVE] == 0.5 and m[K.ADV_NEGATIVE] == 0.5
    assert m[K.CLIP_HIGH] == 0.25 and m[K.CLIP_LOW] == 0.25
    assert m[K.CLIP_HIGH_LOW_PROB] == 0.25  # the one up-clipped token had old probability 0.1
    derived = derived_clip_metrics(m)
    assert derived == {
        K.CLIP_HIGH_GIVEN_POSITIVE: 0.5,  # 1 of the 2 positive-advantage tokens
        K.CLIP_LOW_GIVEN_NEGATIVE: 0.5,
        K.LOW_PROB_GIVEN_HIGH: 1.0,
    }


def test_an_up_clipped_token_of_high_old_probability_is_not_counted_as_low_probability():
    logps, labels, adv, old = _four_token_batch()
    old[0, 1] = math.log(0.6)
    logps = old.clone()
    logps[:, 1] += torch.tensor([1.5, 1.0, 0.5, 1.0]).log()
    out = GRPOLoss(clip_range=0.2)(logps=logps, labels=labels, advantages=adv, old_logps=old)
    assert float(out.metrics[K.CLIP_HIGH]) == 0.25
    assert float(out.metrics[K.CLIP_HIGH_LOW_PROB]) == 0.0
    assert derived_clip_metrics({k: float(v) for k, v in out.metrics.items()})[K.LOW_PROB_GIVEN_HIGH] == 0.0


def test_derived_ratios_are_left_out_when_nothing_is_in_the_denominator():
    shares = {
        K.CLIP_HIGH: 0.0,
        K.ADV_POSITIVE: 0.0,
        K.CLIP_LOW: 0.0,
        K.ADV_NEGATIVE: 0.4,
        K.CLIP_HIGH_LOW_PROB: 0.0,
    }
    assert derived_clip_metrics(shares) == {K.CLIP_LOW_GIVEN_NEGATIVE: 0.0}


def test_step_ratios_come_from_the_steps_shares_not_a_mean_of_micro_batch_ratios():
    """Micro-batch 1 holds seqs 0 and 2 (1 of 1 positive token up-clipped), micro-batch 2 seqs 1 and 3 (0 of
    1): the step's 1 of 2 positive tokens is 0.5 whatever the split."""
    logps, labels, adv, old = _four_token_batch()
    loss = GRPOLoss(clip_range=0.2)
    step = StepMetrics()
    for rows in ([0, 2], [1, 3]):
        part = (logps[rows].detach().requires_grad_(True), labels[rows], adv[rows], old[rows])
        out = loss(
            logps=part[0],
            labels=part[1],
            advantages=part[2],
            old_logps=part[3],
            num_sequences=4,
            num_tokens=4,
        )
        step.add_micro(out, part[1] != IGN)
    summary = step.summary(torch.tensor(1.0), lr=1e-3)
    assert summary[M.TRAIN + K.CLIP_HIGH_GIVEN_POSITIVE] == pytest.approx(0.5)
    assert summary[M.TRAIN + K.CLIP_LOW_GIVEN_NEGATIVE] == pytest.approx(0.5)
    assert summary[M.TRAIN + K.LOW_PROB_GIVEN_HIGH] == pytest.approx(1.0)


def test_accuracy_by_answer_length_from_summed_totals():
    examples = [Example("p", "ab"), Example("q", "abc"), Example("r", "xy")]
    buckets = length_buckets(examples)
    assert buckets == [2, 3]
    # 2 of 3 right, 1 cut off: both answers of length 2 (the "xy" one wrong), the one of length 3 right
    totals = torch.tensor([2.0, 2.0, 3.0, 1.0, 1.0, 2.0, 1.0, 1.0], dtype=torch.float64)
    metrics = validation_metrics(totals, buckets)
    assert metrics[M.VAL_ACCURACY] == pytest.approx(2 / 3)
    assert metrics[M.VAL_CLIPPED_RATIO] == pytest.approx(1 / 3)
    assert metrics[M.VAL_ACCURACY_BY_LENGTH + "2"] == 0.5
    assert metrics[M.VAL_ACCURACY_BY_LENGTH + "3"] == 1.0


def test_free_form_answers_get_no_per_length_split():
    examples = [Example(str(i), "x" * (i + 1)) for i in range(MAX_LENGTH_BUCKETS + 1)]
    assert length_buckets(examples) == []
