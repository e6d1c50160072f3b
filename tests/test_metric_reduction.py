"""A step's metrics reduced over 2 gloo ranks equal one process's over the same micro-batches.

The end-to-end data-parallel tests see ratios within 1e-6 of 1 on their single on-policy step, so they
cannot tell a global minimum from rank 0's; here the ranks hold deliberately different extremes.
"""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp

from twinkle_exp import metric_names as M
from twinkle_exp.loss import LossOutput
from twinkle_exp.loss import metric_keys as K
from twinkle_exp.training.step_metrics import StepMetrics

WORLD = 2


def _micro_batch(i: int) -> tuple[LossOutput, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Micro-batch `i`: its loss output, `mask` `[2, 6]` with i + 3 completion tokens, `entropy` and
    `sampler_gap` `[2, 6]`; ratio extremes and means differ from one micro-batch to the next."""
    g = torch.Generator().manual_seed(i)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask.view(-1)[: i + 3] = True
    metrics = {
        K.RATIO_MEAN: torch.tensor(1.0 + 0.1 * i),
        K.RATIO_MIN: torch.tensor(0.9 - 0.1 * i),
        K.RATIO_MAX: torch.tensor(1.1 + 0.2 * i),
        K.CLIP_LOW: torch.tensor(0.1 * i),
        K.CLIP_HIGH: torch.tensor(0.05 * i),
        K.CLIP_REGION: torch.tensor(0.15 * i),
        K.KL: torch.tensor(0.01 * (i + 1)),
        K.POLICY_LOSS: torch.tensor(-0.2 * i),
    }
    out = LossOutput(torch.tensor(0.3 * i - 0.5), metrics)
    return out, mask, torch.rand(2, 6, generator=g), torch.randn(2, 6, generator=g)


def _summary(micro_batches: list[int]) -> dict[str, float]:
    stats = StepMetrics()
    for i in micro_batches:
        out, mask, entropy, gap = _micro_batch(i)
        stats.add_micro(out, mask, entropy, gap)
    return stats.summary(torch.tensor(2.5), lr=1e-3)


def _rank(rank: int, store: str, results: str) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        # Rank 0 holds micro-batches 0, 1, 2; rank 1 holds 3, 4 (uneven token counts and extremes).
        torch.save(_summary([0, 1, 2] if rank == 0 else [3, 4]), f"{results}{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_step_metrics_reduced_over_ranks_equal_one_process(tmp_path):
    mp.start_processes(_rank, args=(str(tmp_path / "store"), str(tmp_path / "rank")), nprocs=WORLD)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    alone = _summary([0, 1, 2, 3, 4])
    assert ranks[0] == ranks[1]  # every rank logs (rank 0 writes) the same global figures
    assert ranks[0].keys() == alone.keys()
    assert ranks[0] == pytest.approx(alone, rel=1e-6)
    assert alone[M.TRAIN + K.RATIO_MIN] == pytest.approx(0.5)  # rank 1's micro-batch 4
    assert alone[M.TRAIN + K.RATIO_MAX] == pytest.approx(1.9)
    assert alone[M.LOSS] == pytest.approx(sum(0.3 * i - 0.5 for i in range(5)))
