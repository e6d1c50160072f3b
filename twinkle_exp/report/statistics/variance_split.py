"""How much of the spread between runs is the warm-start's: the variance split of a variant's score over
runs crossed warm-start seed (`warmup.seed`) x RL seed (`seed`).

A one-way random-effects model, runs nested in warm-starts: y_wj = mu + a_w + e_wj, a_w ~ (0, s2_between)
the warm-start's effect, e_wj ~ (0, s2_within) the RL seed's given that warm-start. The ANOVA (method of
moments) estimates, for k warm-starts with n_w runs each (N in all):

    MS_between = sum_w n_w (mean_w - mean)^2 / (k - 1)      MS_within = sum_wj (y_wj - mean_w)^2 / (N - k)
    s2_within = MS_within      s2_between = max(0, (MS_between - MS_within) / n0),
    n0 = (N - sum_w n_w^2 / N) / (k - 1)   (= n for n runs per warm-start)

with the F test of s2_between = 0 (F = MS_between / MS_within on k - 1, N - k degrees of freedom). An RL
seed reused under every warm-start does not make the runs pair up: its draws meet other weights from the
first step on, so the model treats them as independent. The intervals of a comparison that used one
warm-start hold the within part only; the between part is what another warm-start would add.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class VarianceSplit:
    between: float  # s2_between: the warm-starts' variance component
    within: float  # s2_within: the RL seeds' given a warm-start
    share_between: float  # between / (between + within): the intraclass correlation; NaN when both are 0
    f: float  # MS_between / MS_within (inf when the within part is 0 and the between part is not)
    p_value: float  # of F under s2_between = 0
    warm_starts: int  # k
    runs: int  # N


def variance_split(scores: Mapping[object, Sequence[float]]) -> VarianceSplit:
    """The split of `scores` ({warm-start seed: its runs' scores}, at least 2 warm-starts and one of them
    with 2 runs or more)."""
    groups = [np.asarray(v, dtype=float).reshape(-1) for v in scores.values()]
    groups = [g for g in groups if len(g)]
    if any(not np.all(np.isfinite(g)) for g in groups):
        raise ValueError("variance_split: scores must be finite")
    k, sizes = len(groups), np.array([len(g) for g in groups], dtype=float)
    total = float(sizes.sum())
    if k < 2 or total - k < 1:
        raise ValueError(
            f"variance_split needs at least 2 warm-starts and more runs than warm-starts, got {k} warm-start(s) "
            f"and {int(total)} run(s)"
        )
    means = np.array([g.mean() for g in groups])
    grand = float(np.concatenate(groups).mean())
    ms_between = float(np.sum(sizes * (means - grand) ** 2) / (k - 1))
    ms_within = float(sum(np.sum((g - g.mean()) ** 2) for g in groups) / (total - k))
    n0 = (total - np.sum(sizes**2) / total) / (k - 1)
    between = max(0.0, (ms_between - ms_within) / n0)
    both = between + ms_within
    if ms_within == 0:  # no RL noise at all: any spread between warm-starts is theirs, with certainty
        f, p = (float("inf"), 0.0) if ms_between > 0 else (float("nan"), 1.0)
    else:
        f = ms_between / ms_within
        p = float(stats.f.sf(f, k - 1, total - k))
    return VarianceSplit(
        between, ms_within, between / both if both > 0 else float("nan"), f, p, k, int(total)
    )
