"""The unbiased pass@k estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained on Code",
arXiv 2107.03374, section 2.1), from n >= k samples of which c are right.

pass@k = 1 - C(n - c, k) / C(n, k): the chance that k samples drawn without replacement from the n include
a right one. The binomials overflow float64 from n of about 1030 on, so the ratio is taken as the product
prod_{i = n - c + 1}^{n} (1 - k / i) (the paper's numerically stable form). "Best of k resampled" (draw k
of the n with replacement, take the best, average) estimates 1 - (1 - c / n)^k instead, which is biased
low against the population's pass@k whenever k > 1 (tests/test_pass_at_k.py measures it).
"""

from __future__ import annotations

import numpy as np


def check_ks(n: int, ks: list[int]) -> None:
    """Refuse k outside 1..n: pass@k needs at least k samples."""
    bad = [k for k in ks if not 1 <= k <= n]
    if bad:
        raise ValueError(f"pass@k needs 1 <= k <= n = {n} samples per prompt, got k = {bad}")


def pass_at_k(correct: np.ndarray, n: int, k: int) -> np.ndarray:
    """`[P]` float64 pass@k per prompt, from `correct` `[P]` (right samples of each prompt's n, ints in
    0..n)."""
    check_ks(n, [k])
    c = np.asarray(correct, dtype=np.int64)
    if c.size and (c.min() < 0 or c.max() > n):
        raise ValueError(f"correct counts must lie in 0..n = {n}, got {c.min()}..{c.max()}")
    out = np.ones(c.shape, dtype=np.float64)
    # Fewer than k wrong samples: every k-subset holds a right one.
    drawable = n - c >= k
    for p in np.flatnonzero(drawable):
        i = np.arange(n - c[p] + 1, n + 1, dtype=np.float64)
        out[p] = 1.0 - np.prod(1.0 - k / i)
    return out
