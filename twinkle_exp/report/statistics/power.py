"""What a comparison could have detected: the minimum detectable effect at the seeds used, and the seeds a
declared margin would need. Never post-hoc power from the observed difference (that only restates p).

Both are for the test the verdict actually uses (Welch's t, or the paired t on per-seed differences), at the
level each test of the family is held to before anything else is rejected: alpha / family size, Holm's
first step (and Benjamini-Hochberg's worst case). The spread is the seeds' observed spread; the effect is
either solved for (the MDE) or declared (the margin).

Power of a two-sided t test at noncentrality lambda: P(T' > t_c) + P(T' < -t_c), T' noncentral t with the
test's df and t_c its critical value. The second term is below 1e-5 wherever the power is 80% (t_c + lambda
> 4.7), so the noncentrality is solved from the first alone, in closed form by scipy.special.nctdtrinc;
tests/test_stats_power.py checks it against the full two-tailed power and against Cohen's table.
"""

from __future__ import annotations

import numpy as np
from scipy import special, stats

from .intervals import TSummary

POWER = 0.8
MAX_SEEDS = 1000  # the seed search stops here: "more than 1000 seeds" is answer enough


def detectable_noncentrality(df, alpha: float, power: float = POWER):
    """Noncentrality lambda = effect / se at which a two-sided t test at level `alpha` with `df` degrees of
    freedom rejects with probability `power`. Vectorised over `df`."""
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"alpha and power must lie in (0, 1), got alpha={alpha}, power={power}")
    critical = special.stdtrit(df, 1 - alpha / 2)
    return special.nctdtrinc(df, 1 - power, critical)[()]


def two_sided_power(noncentrality, df, alpha: float):
    """Power of the two-sided t test at level `alpha` when effect / se = `noncentrality` (both tails; the far
    one as P(T'(-lambda) > t_c), which scipy evaluates where its cdf at large lambda gives NaN)."""
    critical = stats.t.ppf(1 - alpha / 2, df)
    return stats.nct.sf(critical, df, noncentrality) + stats.nct.sf(critical, df, -noncentrality)


def minimum_detectable_effect(s: TSummary, alpha: float, power: float = POWER) -> float:
    """The smallest true difference the test behind `s` (its se and df) detects with `power` at level
    `alpha`, in the scores' units."""
    return float(detectable_noncentrality(s.df, alpha, power) * s.se)


def _welch_df(v1, v2, n):
    """Welch-Satterthwaite df with per-seed variances v1, v2 at n seeds each."""
    total = v1 + v2
    return np.where(total == 0, 2 * n - 2.0, total**2 / np.maximum(v1**2 + v2**2, 1e-300) * (n - 1))


def seeds_needed(
    effect: float,
    sd_first: float,
    sd_second: float | None = None,
    *,
    alpha: float,
    power: float = POWER,
) -> int:
    """Seeds per variant at which the test detects a true difference `effect` with `power` at level `alpha`.

    Unpaired (Welch) when `sd_second` is given: the two variants' per-seed standard deviations, n seeds each.
    Paired when it is None: `sd_first` is the standard deviation of the per-seed differences. Returns
    MAX_SEEDS + 1 when even MAX_SEEDS are not enough; 2 when there is no spread at all.
    """
    effect = abs(float(effect))
    if effect == 0:
        raise ValueError("seeds_needed needs a nonzero effect (a declared margin)")
    paired = sd_second is None

    def enough(n: int) -> bool:
        if paired:
            se, df = sd_first / np.sqrt(n), n - 1.0
        else:
            v1, v2 = sd_first**2, sd_second**2
            se, df = np.sqrt((v1 + v2) / n), float(_welch_df(v1, v2, n))
        return se == 0 or effect / se >= detectable_noncentrality(df, alpha, power)

    if not enough(MAX_SEEDS):
        return MAX_SEEDS + 1
    low, high = 2, MAX_SEEDS  # enough(high); power grows with n, so bisect for the first n that is enough
    if enough(low):
        return low
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high
