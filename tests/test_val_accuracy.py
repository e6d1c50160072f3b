"""val/accuracy is the reward's own verdict where it gives one (reward=math), else exact match."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from twinkle_exp import metric_names as M
from twinkle_exp.rewards import RewardFunction, RewardSet, exact_match, math_reward
from twinkle_exp.tasks import Example
from twinkle_exp.training import evaluation

COMPLETIONS = ["72", "The answer is 72.", "59 + 63 =", r"\boxed{122}"]
TRUNCATED = [False, False, False, True]
EXAMPLES = [Example("What is 70 + 2?", "72")] * 2 + [Example("What is 59 + 63?", "122")] * 2


def decoded(completions: list[str], truncated: list[bool]) -> SimpleNamespace:
    """What greedy decoding returns, as evaluation reads it (lengths: one token per character, + EOS)."""
    lengths = torch.tensor([len(c) + (not cut) for c, cut in zip(completions, truncated, strict=True)])
    return SimpleNamespace(
        completions=completions, truncated=torch.tensor(truncated), completion_lengths=lengths
    )


@pytest.fixture
def fixed_completions(monkeypatch):
    """Greedy decoding replaced by the completions above, the last one cut off at the budget."""

    def generate(model, tokenizer, prompts, options, **kwargs):
        n = len(prompts)
        return decoded(COMPLETIONS[:n], TRUNCATED[:n])

    monkeypatch.setattr(evaluation, "generate", generate)


def _metrics(rewards: RewardSet) -> dict[str, float]:
    totals = evaluation.greedy_totals(
        nn.Linear(1, 1), None, EXAMPLES, rewards, max_new_tokens=4, batch_size=len(EXAMPLES)
    )
    return evaluation.validation_metrics(totals)


def test_math_accuracy_is_the_math_verdict(fixed_completions):
    fn = math_reward(timeout_s=2.0, workers=1)
    try:
        metrics = _metrics(RewardSet([RewardFunction("math", fn)], truncated_max=None))
    finally:
        fn.close()
    # "72" and "The answer is 72." are right; the restated question is not; the cut-off one is not counted.
    assert metrics[M.VAL_ACCURACY] == pytest.approx(2 / 4)
    assert metrics[M.VAL_REWARD_MEAN] == pytest.approx(3 / 4)  # truncated_max=None: the cut-off one scores


def test_without_a_verdict_accuracy_stays_exact_match(fixed_completions):
    rewards = RewardSet([RewardFunction("exact", exact_match)])
    assert _metrics(rewards)[M.VAL_ACCURACY] == pytest.approx(1 / 4)


def test_most_answers_cut_off_before_training_is_said_at_start_up(monkeypatch, caplog):
    cut = [True, True, True, False]  # 3 of 4 at the budget
    monkeypatch.setattr(
        evaluation,
        "generate",
        lambda model, tokenizer, prompts, options, **kwargs: decoded(
            COMPLETIONS[: len(prompts)], cut[: len(prompts)]
        ),
    )
    metrics = _metrics(RewardSet([RewardFunction("exact", exact_match)]))
    assert metrics[M.VAL_CLIPPED_RATIO] == pytest.approx(3 / 4)
    with caplog.at_level(logging.WARNING, logger="twinkle_exp.training.evaluation"):
        message = evaluation.startup_truncation_warning(metrics, max_new_tokens=4)
    assert message == (
        "before training, 75% of the greedy answers to the held-out prompts stopped at "
        "rollout.max_new_tokens=4 without EOS: the model's answers do not fit the budget, so the rewards will "
        "score unfinished text (or, with reward.truncated_max, give every cut-off completion the same capped "
        "reward). Raise rollout.max_new_tokens or ask the prompt for a shorter answer"
    )
    assert [r.getMessage() for r in caplog.records] == [message]


def test_answers_that_mostly_end_by_themselves_are_not_warned_of(fixed_completions):
    metrics = _metrics(RewardSet([RewardFunction("exact", exact_match)]))
    assert metrics[M.VAL_CLIPPED_RATIO] == pytest.approx(1 / 4)
    assert evaluation.startup_truncation_warning(metrics, max_new_tokens=4) is None
    assert evaluation.startup_truncation_warning({M.VAL_CLIPPED_RATIO: 0.5}, max_new_tokens=4) is None


@pytest.mark.usefixtures("one_thread")
def test_a_policy_that_never_stops_is_warned_of_once_at_the_first_validation(caplog):
    import module_helpers

    from twinkle_exp.loss import GRPOLoss

    module = module_helpers.make_module(GRPOLoss(beta=0.0))  # random weights: greedy text rarely ends
    with caplog.at_level(logging.WARNING, logger="twinkle_exp.training.evaluation"):
        first = module.log_validation()
        module.log_validation()
    assert first[M.VAL_CLIPPED_RATIO] > 0.5  # the precondition: most of the 8 answers were cut off
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "rollout.max_new_tokens=8 without EOS" in lines[0]


def test_sampled_validation_gives_pass_at_k_and_mean_at_n(monkeypatch):
    """n = 4 samples of each of 3 prompts, right 0, 1 and 3 times: pass@k from the closed form
    1 - C(4 - c, k) / C(4, k) averaged over the prompts, mean@4 = (0 + 1 + 3) / 12."""
    from math import comb

    from twinkle_exp.config.schema import ValSamplesConfig

    right = {"a": 0, "b": 1, "c": 3}
    examples = [Example(p, "X") for p in right]

    def generate(model, tokenizer, prompts, options, generator=None, **kwargs):
        assert options.group_size == 4 and options.temperature == 0.7 and not options.greedy
        assert generator is not None  # never the training's global stream
        completions = [("X" if i < right[p] else "Y") for p in prompts for i in range(4)]
        return decoded(completions, [False] * len(completions))

    monkeypatch.setattr(evaluation, "generate", generate)
    settings = ValSamplesConfig(n=4, temperature=0.7, ks=[1, 2, 4])
    totals = evaluation.sampled_totals(
        nn.Linear(1, 1),
        None,
        examples,
        RewardSet([RewardFunction("exact", exact_match)]),
        settings,
        max_new_tokens=4,
        batch_size=8,  # 2 prompts a chunk: the counts must not mix across chunks
        generator=torch.Generator().manual_seed(0),
    )
    metrics = evaluation.sampled_metrics(totals, settings)
    expected = {k: sum(1 - comb(4 - c, k) / comb(4, k) for c in right.values()) / 3 for k in (1, 2, 4)}
    assert set(metrics) == {M.VAL_MEAN_AT + "4", *(M.VAL_PASS_AT + str(k) for k in (1, 2, 4))}
    for k, value in expected.items():
        assert metrics[M.VAL_PASS_AT + str(k)] == pytest.approx(value, abs=1e-12)
    assert metrics[M.VAL_PASS_AT + "4"] == pytest.approx(2 / 3)  # prompts b and c
    assert metrics[M.VAL_MEAN_AT + "4"] == pytest.approx(4 / 12)


def test_sampled_validation_settings_refuse_k_above_n():
    from twinkle_exp.config.schema import ValSamplesConfig

    with pytest.raises(ValueError, match="each k must lie in 1..n = 4"):
        ValSamplesConfig(n=4, ks=[1, 8])
    assert ValSamplesConfig(n=3).resolved_ks() == [1, 2, 3]


def _csv_rows(path):
    import csv

    return list(csv.DictReader(path.open()))


@pytest.mark.slow
def test_a_run_with_sampled_validation_logs_pass_at_k_and_trains_as_without(run_cli, tmp_path):
    """Through the CLI: val/pass@1, val/pass@4 and val/mean@4 at the first validation, every 2nd one and the
    last, nowhere else; and the training's figures equal a run's without them (its own random stream)."""
    common = ["debug=fast", "logger=csv", "trainer.max_steps=12", "trainer.val_every=1"]
    sampled = [
        *common,
        "trainer.val_samples.n=4",
        "trainer.val_samples.ks=[1,4]",
        "trainer.val_samples.every=2",
    ]
    for name, args in (("sampled", sampled), ("plain", common)):
        proc = run_cli(*args, f"hydra.run.dir={tmp_path / name}")
        assert proc.returncode == 0, proc.stderr[-2000:]
    rows = _csv_rows(tmp_path / "sampled" / "metrics.csv")
    keys = [M.VAL_PASS_AT + "1", M.VAL_PASS_AT + "4", M.VAL_MEAN_AT + "4"]
    at = {int(r["step"]): r for r in rows if r.get(keys[0])}
    assert sorted(at) == [0, 8, 12]  # rollouts 0 and 2 of 3 (every 2nd validation), and the last step
    validated = {int(r["step"]) for r in rows if r.get(M.VAL_ACCURACY)}
    assert validated >= {0, 4, 8, 12}  # the greedy ones go on as before
    for r in at.values():
        p1, p4, mean = (float(r[k]) for k in keys)
        assert 0.0 <= p1 <= p4 <= 1.0 and mean == pytest.approx(p1)  # mean@n is pass@1's estimate
    plain = _csv_rows(tmp_path / "plain" / "metrics.csv")
    assert M.VAL_PASS_AT + "1" not in plain[0]  # off by default

    def losses(rs):
        return [(r["step"], r[M.LOSS]) for r in rs if r.get(M.LOSS)]

    assert losses(rows) and losses(rows) == losses(plain)
