"""Simulations behind the statistics' published figures (coverage, level, power), shared by the
tests/test_stats_*.py tests and docs/statistics.md.

`python tests/stats_simulation.py` prints every figure docs/statistics.md quotes (it runs for a few minutes).
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

from twinkle_exp.report.statistics.intervals import (
    newcombe_bounds,
    one_sample_summary,
    prob_improvement,
    t_bounds,
    t_p_value,
    welch_summary,
)
from twinkle_exp.report.statistics.paired import paired_summary
from twinkle_exp.report.statistics.verdicts import DIFFERENT, PairData, pair_verdicts

SIMULATIONS = 20_000  # Monte Carlo error of a 95% coverage: sqrt(0.95 * 0.05 / 20000) = 0.15%
SEED_COUNTS = (3, 5, 10)
SIGMA = 0.02  # per-seed spread of a score (2 accuracy points), as in the sweeps measured by issue 29


def draw(kind: str, rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[np.ndarray, float, float]:
    """Scores of one distribution, its true mean and sd: normal, lognormal (sigma 1, skewness 6.2) or an
    accuracy-like beta near the ceiling (Beta(18, 2): mean 0.9, sd 0.065, skewness -1.1)."""
    if kind == "normal":
        return rng.standard_normal(shape), 0.0, 1.0
    if kind == "lognormal":
        return rng.lognormal(0.0, 1.0, shape), float(np.exp(0.5)), float(np.sqrt((np.e - 1) * np.e))
    if kind == "beta":
        return rng.beta(18.0, 2.0, shape), 0.9, float(np.sqrt(18 * 2 / (20**2 * 21)))
    raise ValueError(kind)


def covers(low, high, truth) -> float:
    return float(np.mean((low <= truth) & (truth <= high)))


def mean_coverage(kind: str, n: int, sims: int = SIMULATIONS, seed: int = 0) -> float:
    """Share of `sims` samples of n whose 95% t interval of the mean holds the true mean."""
    x, truth, _ = draw(kind, np.random.default_rng(seed), (sims, n))
    return covers(*t_bounds(one_sample_summary(x)), truth)


def bootstrap_coverage(method: str, n: int, sims: int = 4000, seed: int = 0) -> float:
    """The same for scipy's bootstrap interval ("percentile", "BCa", "basic"; 2000 resamples), normal data:
    the intervals the t interval was chosen over. 4000 simulations (MC error 0.6%)."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((sims, n))
    res = stats.bootstrap((x,), np.mean, axis=-1, method=method, n_resamples=2000, rng=rng, batch=200)
    return covers(res.confidence_interval.low, res.confidence_interval.high, 0.0)


def difference_coverage(
    kind: str, n: int, sims: int = SIMULATIONS, seed: int = 0, spread: float = 1.0
) -> float:
    """Share of n vs n samples whose 95% Welch interval holds the true difference (0; y scaled by
    `spread` about its mean, so the variances differ but the means do not)."""
    rng = np.random.default_rng(seed)
    (x, truth, _), (y, _, _) = draw(kind, rng, (sims, n)), draw(kind, rng, (sims, n))
    y = truth + spread * (y - truth)
    return covers(*t_bounds(welch_summary(x, y)), 0.0)


def paired_coverage(n: int, sims: int = SIMULATIONS, seed: int = 0) -> float:
    """Share of paired samples (shared per-seed component of sd 3) whose paired t interval holds 0."""
    rng = np.random.default_rng(seed)
    shared = 3.0 * rng.standard_normal((sims, n))
    x, y = shared + rng.standard_normal((sims, n)), shared + rng.standard_normal((sims, n))
    return covers(*t_bounds(paired_summary(x, y)), 0.0)


def prob_improvement_coverage(n: int, shift: float, sims: int = SIMULATIONS, seed: int = 0) -> float:
    """Share of n vs n normal samples, x shifted by `shift` sd, whose score interval holds P(X > Y)."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((sims, n)) + shift, rng.standard_normal((sims, n))
    truth = stats.norm.cdf(shift / np.sqrt(2))
    return covers(*newcombe_bounds(prob_improvement(x, y), n, n), truth)


def test_level(
    kind: str, n: int, alpha: float, paired: bool, sims: int = SIMULATIONS, seed: int = 0
) -> float:
    """Share of identical-variant samples that the verdict's t test rejects at `alpha`."""
    rng = np.random.default_rng(seed)
    (x, _, _), (y, _, _) = draw(kind, rng, (sims, n)), draw(kind, rng, (sims, n))
    s = paired_summary(x, y) if paired else welch_summary(x, y)
    return float(np.mean(t_p_value(s) < alpha))


test_level.__test__ = False  # a simulation, not a pytest test

COLLAPSE_DROP, COLLAPSE_RATE = 0.20, 0.10  # the audit's null: 20 points lost on 10% of seeds ...
COLLAPSE_GAIN = COLLAPSE_DROP * COLLAPSE_RATE / (1 - COLLAPSE_RATE)  # ... and 2.2 points gained otherwise


def collapse_differences(rng: np.random.Generator, sims: int, n: int) -> np.ndarray:
    """Per-seed paired differences `[sims, n]` under the collapse null: the first loss drops by 20 points
    on 10% of seeds and is 2.2 points better on the rest, so both losses have the same mean; each run adds
    its own noise of SIGMA (a shared per-seed component cancels in the difference)."""
    collapsed = rng.random((sims, n)) < COLLAPSE_RATE
    offset = np.where(collapsed, -COLLAPSE_DROP, COLLAPSE_GAIN)
    return offset + SIGMA * (rng.standard_normal((sims, n)) - rng.standard_normal((sims, n)))


def sign_flip_p_values(differences: np.ndarray) -> np.ndarray:
    """The exact two-sided sign-flip p of each row of `differences` `[sims, n]` (n <= 13), as
    `paired.sign_flip_p_value` computes it for one."""
    n = differences.shape[1]
    signs = 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)  # [2^n, n]
    null = signs @ differences.T / n  # [2^n, sims]
    observed = differences.mean(axis=1)
    gamma = np.abs(1e-14 * observed)
    less = np.mean(null <= observed + gamma, axis=0)
    greater = np.mean(null >= observed - gamma, axis=0)
    return np.minimum(1.0, 2 * np.minimum(less, greater))


def collapse_level(n: int, alpha: float, sims: int = SIMULATIONS, seed: int = 0) -> tuple[float, float]:
    """Rejection rates at `alpha` under the collapse null: (the paired t alone, the verdict's rule: the t and
    the exact sign-flip test both below alpha)."""
    d = collapse_differences(np.random.default_rng(seed), sims, n)
    by_t = t_p_value(one_sample_summary(d)) < alpha
    return float(np.mean(by_t)), float(np.mean(by_t & (sign_flip_p_values(d) < alpha)))


def warm_start_coverage(
    warm_starts: int, seeds: int, between: float, sims: int = SIMULATIONS, seed: int = 0
) -> tuple[float, float, float]:
    """Two identical variants, `warm_starts` x `seeds` runs each; each (variant, warm-start) cell has its own
    random effect of sd `between` (in units of the seed noise's sd). Returns the 95% coverage of the true
    difference (0) by (the report's across-warm-start interval: the paired t over per-warm-start means,
    the same interval that pools every run as a seed of its variant (Welch), and the rejection rate at 0.05
    of the first's t alone)."""
    rng = np.random.default_rng(seed)
    effects = between * rng.standard_normal((2, sims, warm_starts, 1))
    runs = effects + rng.standard_normal((2, sims, warm_starts, seeds))
    means = runs.mean(axis=-1)  # [2, sims, warm_starts]
    across = paired_summary(means[0], means[1])
    pooled = welch_summary(runs[0].reshape(sims, -1), runs[1].reshape(sims, -1))
    level = float(np.mean(t_p_value(across) < 0.05))
    return covers(*t_bounds(across), 0.0), covers(*t_bounds(pooled), 0.0), level


def sweep(rng: np.random.Generator, seeds: int, shift: float = 0.0, kind: str = "normal") -> list[PairData]:
    """One synthetic sweep: 6 variants x `seeds` seeds x 2 scores (AUC and final accuracy), every pair on
    both scores; variant v5 is better by `shift` x SIGMA on both. Normal scores are correlated 0.7 across
    the two scores (one run's); skewed ones are independent, standardised to SIGMA."""
    if kind == "normal":
        cov = SIGMA**2 * np.array([[1.0, 0.7], [0.7, 1.0]])
        noise = rng.multivariate_normal([0.0, 0.0], cov, (6, seeds))
    else:
        values, mean, sd = draw(kind, rng, (6, seeds, 2))
        noise = (values - mean) / sd * SIGMA
    scores = 0.6 + noise
    scores[5] += shift * SIGMA
    labels = [f"v{i}" for i in range(6)]
    return [
        PairData(labels[a], labels[b], score, tuple(scores[a, :, k]), tuple(scores[b, :, k]))
        for k, score in enumerate(("AUC", "final accuracy"))
        for a, b in itertools.combinations(range(6), 2)
    ]


def false_call_rate(
    sweeps: int, seeds: int, method: str = "holm", kind: str = "normal", seed: int = 0
) -> float:
    """Share of sweeps of 6 identical variants with at least one "different" verdict among the 30 tests."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(sweeps):
        _, verdicts = pair_verdicts(sweep(rng, seeds, kind=kind), "null", method=method)
        hits += any(v.verdict == DIFFERENT for v in verdicts)
    return hits / sweeps


def detection_rate(sweeps: int, seeds: int, shift: float, seed: int = 0) -> float:
    """Share of the shifted variant's pairs on AUC (v5 vs each other variant) called "different", v5 higher."""
    rng = np.random.default_rng(seed)
    called = total = 0
    for _ in range(sweeps):
        _, verdicts = pair_verdicts(sweep(rng, seeds, shift), "shifted")
        for v in verdicts:
            if v.score == "AUC" and v.second == "v5":
                total += 1
                called += v.verdict == DIFFERENT and v.effect < 0
    return called / total


def main() -> None:
    out = sys.stdout.write
    out(f"coverage of 95% intervals, {SIMULATIONS} simulations per cell (MC error 0.15%)\n")
    for kind in ("normal", "lognormal", "beta"):
        for n in SEED_COUNTS:
            m, d = mean_coverage(kind, n), difference_coverage(kind, n)
            out(f"  {kind:9} n={n:2}: mean (t) {m:.3f}  difference (Welch) {d:.3f}\n")
    for n in SEED_COUNTS:
        cells = "  ".join(f"{m} {bootstrap_coverage(m, n):.3f}" for m in ("percentile", "BCa", "basic"))
        out(f"  normal    n={n:2}: mean, bootstrap (4000 simulations): {cells}\n")
    for n in SEED_COUNTS:
        out(f"  normal, sd ratio 3, n={n:2}: Welch {difference_coverage('normal', n, spread=3.0):.3f}  ")
        out(f"paired t (shared sd 3) {paired_coverage(n):.3f}\n")
    for n in SEED_COUNTS:
        cells = "  ".join(f"shift {s:g}: {prob_improvement_coverage(n, s):.3f}" for s in (0, 1, 2, 3))
        out(f"  P(improvement) score interval n={n:2}: {cells}\n")
    out("level of the verdict's t test (share of identical pairs rejected), 200000 simulations\n")
    for kind in ("normal", "lognormal", "beta"):
        for n in SEED_COUNTS:
            cells = "  ".join(
                f"{name} {test_level(kind, n, a, p, sims=200_000):.4f}"
                for p in (False, True)
                for a, name in ((0.05, "Welch" if not p else "paired"), (0.05 / 30, "@a/30"))
            )
            out(f"  {kind:9} n={n:2}: {cells}\n")
    out(
        "level under the collapse null (20 points lost on 10% of seeds, 2.2 gained otherwise), 200000 simulations\n"
    )
    for n in SEED_COUNTS:
        for a, name in ((0.05, "0.05"), (0.05 / 30, "0.05/30")):
            t_alone, rule = collapse_level(n, a, sims=200_000)
            out(
                f"  n={n:2} at {name:7}: paired t alone {t_alone:.4f} ({t_alone / a:.1f}x)  t and sign-flip {rule:.4f}\n"
            )
    out("warm-start design: coverage of the difference of two identical variants, 20000 simulations\n")
    for warm_starts, seeds in ((3, 3), (3, 5), (5, 3), (10, 3)):
        for between in (0.0, 1.0, 3.0):
            across, pooled, level = warm_start_coverage(warm_starts, seeds, between)
            out(
                f"  {warm_starts:2} warm-starts x {seeds} seeds, sd between {between:g}: across (t on warm-start "
                f"means) {across:.3f}  pooled as seeds (Welch) {pooled:.3f}  across t level {level:.4f}\n"
            )
    out("sweeps of 6 variants x 2 scores, Holm, 1000 sweeps each (MC error about 0.7%)\n")
    for kind in ("normal", "lognormal", "beta"):
        for n in (5, 10):
            out(
                f"  identical, {kind:9} n={n:2}: >= 1 'different' in {false_call_rate(1000, n, kind=kind):.3f}\n"
            )
    out(f"  identical, normal n= 5, no adjustment: {false_call_rate(1000, 5, method='none'):.3f}\n")
    for n in (5, 10):
        out(
            f"  v5 shifted by 2.5 sd, n={n:2}: its AUC pairs called different {detection_rate(1000, n, 2.5):.3f}\n"
        )


if __name__ == "__main__":
    main()
