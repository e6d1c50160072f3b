"""Rank bookkeeping in one process: prompt streams per rank, the global batch's split, strategies, rank 0's
files, the warm-start wait, and the single-process identities of the collectives."""

from __future__ import annotations

import dataclasses

import lightning as L
import pytest
import torch

from twinkle_exp.config.schema import WarmupConfig
from twinkle_exp.parallel import collectives
from twinkle_exp.parallel.launcher_env import rank_hydra_overrides
from twinkle_exp.parallel.ranks import check_launch, spawns_processes
from twinkle_exp.parallel.sharding import transformer_blocks
from twinkle_exp.parallel.strategy import FSDP2Strategy, lightning_strategy
from twinkle_exp.policy.build import tiny_policy
from twinkle_exp.rewards import RewardFunction, RewardSet, partial_credit
from twinkle_exp.tasks import ReverseTask
from twinkle_exp.tasks.prompt_stream import PromptStream, prompts_per_rank
from twinkle_exp.tracking.run_json import JobInfo, RunStatus
from twinkle_exp.training.evaluation import greedy_totals, validation_metrics
from twinkle_exp.training.warmup import warm_start


def _first_batch(rank: int, seed: int = 0) -> list[str]:
    task = ReverseTask(num_validation=8)
    return next(iter(PromptStream(task, 4, seed=seed, rank=rank)))["prompts"]


def test_prompt_streams_differ_between_ranks_and_ignore_the_environment(monkeypatch):
    rank0 = _first_batch(rank=0)
    assert _first_batch(rank=0) == rank0  # reproducible
    assert _first_batch(rank=1) != rank0
    assert _first_batch(rank=0, seed=1) != rank0
    # A second node's first process has LOCAL_RANK 0 and, under Lightning's launcher, no RANK: only the
    # rank handed in (trainer.global_rank) may decide the stream.
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert _first_batch(rank=0) == rank0


def test_prompts_per_step_is_split_evenly_over_ranks():
    assert prompts_per_rank(16, 1) == 16
    assert prompts_per_rank(16, 4) == 4
    with pytest.raises(ValueError, match=r"rollout.prompts_per_step=6 must be a positive multiple of the 4"):
        prompts_per_rank(6, 4)


def test_strategy_names():
    assert isinstance(lightning_strategy("fsdp2"), FSDP2Strategy)
    assert lightning_strategy("ddp") == "ddp"
    with pytest.raises(ValueError, match="trainer=fsdp"):
        lightning_strategy("fsdp")


def test_fsdp2_puts_every_process_in_the_data_parallel_dimension():
    trainer = L.Trainer(accelerator="cpu", devices=2, num_nodes=3, strategy=FSDP2Strategy(), logger=False)
    assert trainer.world_size == 6
    assert (trainer.strategy._data_parallel_size, trainer.strategy._tensor_parallel_size) == (6, 1)


def test_a_multirun_that_lightning_would_relaunch_is_refused():
    spawning = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    assert spawns_processes(spawning)
    check_launch(spawning, multirun=False)
    with pytest.raises(ValueError, match="torchrun"):
        check_launch(spawning, multirun=True)
    check_launch(L.Trainer(accelerator="cpu", devices=1, logger=False), multirun=True)


def test_transformer_blocks_of_the_built_in_and_a_hugging_face_model():
    model = tiny_policy(d_model=16, n_layers=3, n_heads=2).model
    assert transformer_blocks(model) == list(model.blocks)
    from twinkle_exp.models import build_tiny_hf_model

    hf = build_tiny_hf_model(vocab_size=50, num_layers=2)
    blocks = transformer_blocks(hf)
    assert blocks == list(hf.model.layers) and len(blocks) == 2


def test_only_rank_zero_writes_run_json(tmp_path):
    RunStatus(JobInfo(output_dir=tmp_path / "other"), seed=0, write=False).finish("finished")
    assert not (tmp_path / "other").exists()
    RunStatus(JobInfo(output_dir=tmp_path / "zero"), seed=0).finish("finished")
    assert (tmp_path / "zero" / "run.json").exists()


def test_other_ranks_wait_for_the_warm_start_cache(tmp_path, monkeypatch):
    import twinkle_exp.training.warmup as warmup

    cfg = dataclasses.replace(WarmupConfig(), steps=1, batch_size=4, cache_dir=str(tmp_path))
    torch.manual_seed(0)
    trained = tiny_policy(d_model=16, n_layers=1, n_heads=2)
    task = ReverseTask(num_validation=8)
    monkeypatch.setattr(warmup, "RANK_WAIT_S", 0.2)
    with pytest.raises(TimeoutError, match="rank 0"):  # nothing cached yet: never trains itself
        warm_start(trained, task, cfg, "k", trains=False)
    assert not list(tmp_path.iterdir())
    assert warm_start(trained, task, cfg, "k")["cached"] is False  # rank 0 trains and writes
    torch.manual_seed(1)
    waiting = tiny_policy(d_model=16, n_layers=1, n_heads=2)
    assert warm_start(waiting, task, cfg, "k", trains=False)["cached"] is True
    for a, b in zip(trained.model.parameters(), waiting.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_collectives_are_identities_in_one_process():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert torch.equal(collectives.all_reduce(x, "min"), x)
    assert torch.equal(collectives.all_gather_rows(x), x)
    assert collectives.all_gather_object("a") == ["a"]
    assert collectives.step_totals(3, 17, torch.device("cpu")) == (3, 17)
    assert collectives.shard([1, 2, 3]) == [1, 2, 3]
    assert (collectives.world_size(), collectives.rank()) == (1, 0)


def test_validation_shares_add_up_to_the_whole_set():
    # What the ranks' validation totals sum to: the shards of shard() partition the held-out set, and
    # the summed totals give the whole set's accuracy and mean reward.
    torch.manual_seed(0)
    policy = tiny_policy(d_model=16, n_layers=1, n_heads=2)
    examples = ReverseTask(num_validation=9).validation_set()
    rewards = RewardSet([RewardFunction("partial", partial_credit)], truncated_max=None)  # random: no EOS
    kwargs = {"max_new_tokens": 6, "batch_size": 4}
    whole = greedy_totals(policy.model, policy.tokenizer, examples, rewards, **kwargs)
    shares = [examples[r::2] for r in range(2)]  # collectives.shard's split for 2 ranks
    assert sorted(e.prompt for s in shares for e in s) == sorted(e.prompt for e in examples)
    summed = sum(greedy_totals(policy.model, policy.tokenizer, s, rewards, **kwargs) for s in shares)
    assert summed[2] == len(examples) and summed[1] > 0
    assert validation_metrics(summed) == pytest.approx(validation_metrics(whole), rel=1e-6)


def test_ranks_started_by_torchrun_or_srun_keep_their_own_log():
    assert rank_hydra_overrides({"RANK": "2"}) == ["hydra.output_subdir=null", "hydra.job.name=rank2"]
    assert rank_hydra_overrides({"SLURM_PROCID": "1"})[1] == "hydra.job.name=rank1"
    assert rank_hydra_overrides({"RANK": "0", "SLURM_PROCID": "0"}) == []
    assert rank_hydra_overrides({"LOCAL_RANK": "1"}) == []  # Lightning's launcher names its own ranks
