"""Speed apart from ceiling: ScaleRL's sigmoid of score against compute, fitted per run.

    R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)

(Khatri et al. 2025, arXiv 2510.13786): A is the asymptote (the ceiling), C_mid the compute at which half of
the gain A - R0 is made and B the steepness (together, the efficiency); R0 is the score at C = 0, fixed to
the run's first value unless it is fitted too. C counts samples drawn (or completion tokens) up to a
logged step (`samples_drawn`, `tokens_drawn`). An AUC at a fixed budget mixes the two: a loss may be slower
and still reach more.

The fit is least squares (scipy's `curve_fit`, bounded: A within `a_range`, by default from the lowest
score to the highest plus twice the scores' span, which ScaleRL caps at 1 for a pass rate: pass (0, 1)
then; B in [0.05, 20]; C_mid within 1/100 and 100 times the compute range) from a grid of starts, the best
kept, so a flat or noisy curve gives a fit, not an exception; `extrapolation_check` fits the first half of a run's
points and states the error of its prediction on the second half: a fit whose extrapolation is off by
more than the differences it is asked to rank says nothing about A. Pure numpy / scipy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import curve_fit

from .intervals import Interval, mean_interval

B_RANGE = (0.05, 20.0)
PARAMETERS = ("A", "B", "C_mid", "R0")


def sigmoid(c, r0: float, a: float, b: float, c_mid: float) -> np.ndarray:
    """R(C) at compute `c` (`[n]`, >= 0); R(0) = R0."""
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore", over="ignore"):
        power = np.where(c > 0, (c_mid / np.where(c > 0, c, 1.0)) ** b, np.inf)
    return r0 + (a - r0) / (1.0 + power)


@dataclass(frozen=True)
class SigmoidFit:
    A: float
    B: float
    C_mid: float
    R0: float
    rmse: float  # root mean square residual over the fitted points
    n: int  # points fitted
    # Parameters that ended at a bound of the search ("A" at 1.0 for a pass rate): there the fit says "at
    # least/at most this", not "this", and no interval over seeds of it is an interval of an estimate.
    at_bound: tuple[str, ...] = ()

    def predict(self, c) -> np.ndarray:
        return sigmoid(c, self.R0, self.A, self.B, self.C_mid)


def _points(c, r) -> tuple[np.ndarray, np.ndarray]:
    c, r = np.asarray(c, dtype=float).reshape(-1), np.asarray(r, dtype=float).reshape(-1)
    if c.shape != r.shape:
        raise ValueError(f"compute and scores must be of one length, got {len(c)} and {len(r)}")
    if not (np.all(np.isfinite(c)) and np.all(np.isfinite(r))) or np.any(c < 0):
        raise ValueError("compute must be finite and >= 0 and scores finite")
    order = np.argsort(c, kind="stable")
    return c[order], r[order]


def fit_sigmoid(
    c, r, r0: float | None = None, fit_r0: bool = False, a_range: tuple[float, float] | None = None
) -> SigmoidFit:
    """The least-squares sigmoid through points (`c` compute `[n]`, `r` scores `[n]`). R0 is `r0`, else the
    score at the smallest compute; `fit_r0` fits it too (within the scores' range widened by their span);
    `a_range`: the asymptote's bounds (module docstring)."""
    c, r = _points(c, r)
    positive = c[c > 0]
    if len(positive) < 3 + fit_r0:
        raise ValueError(f"a sigmoid needs at least {3 + fit_r0} points at compute > 0, got {len(positive)}")
    r0 = float(r[0]) if r0 is None else float(r0)
    low, high = float(min(r.min(), r0)), float(max(r.max(), r0))
    span = max(high - low, 1e-9)
    c_lo, c_hi = positive.min() / 100.0, positive.max() * 100.0
    a_lo, a_hi = (low, high + 2 * span) if a_range is None else (float(a_range[0]), float(a_range[1]))
    if not a_lo < a_hi:
        raise ValueError(f"a_range must be (low, high) with low < high, got {a_range}")
    bounds_lo = [a_lo, B_RANGE[0], c_lo] + ([low - span] if fit_r0 else [])
    bounds_hi = [a_hi, B_RANGE[1], c_hi] + ([high + span] if fit_r0 else [])

    def model(x, a, b, c_mid, *rest):
        return sigmoid(x, rest[0] if fit_r0 else r0, a, b, c_mid)

    best: tuple[float, np.ndarray] | None = None
    tail = float(np.mean(r[-max(1, len(r) // 4) :]))
    for c_mid in np.geomspace(positive.min(), positive.max(), 5):
        for b in (0.5, 1.0, 3.0):
            start = [np.clip(tail, a_lo, a_hi), b, c_mid] + ([r0] if fit_r0 else [])
            try:
                params, _ = curve_fit(model, c, r, p0=start, bounds=(bounds_lo, bounds_hi), maxfev=5000)
            except (RuntimeError, ValueError):
                continue
            sse = float(np.sum((model(c, *params) - r) ** 2))
            if best is None or sse < best[0]:
                best = (sse, params)
    if best is None:
        raise ValueError("the sigmoid fit did not converge from any start")
    sse, params = best
    a, b, c_mid = (float(x) for x in params[:3])
    names = ("A", "B", "C_mid", "R0")[: len(params)]
    at_bound = tuple(
        name
        for name, value, lo, hi in zip(names, params, bounds_lo, bounds_hi, strict=True)
        if np.isclose(value, lo, rtol=1e-6, atol=1e-9) or np.isclose(value, hi, rtol=1e-6, atol=1e-9)
    )
    r0_fit = float(params[3]) if fit_r0 else r0
    return SigmoidFit(a, b, c_mid, r0_fit, float(np.sqrt(sse / len(c))), len(c), at_bound)


@dataclass(frozen=True)
class ExtrapolationCheck:
    fit: SigmoidFit  # on the first half of the points
    mean_abs_error: float  # of its prediction on the second half
    max_abs_error: float
    held_out: int  # points in the second half


def extrapolation_check(
    c, r, r0: float | None = None, a_range: tuple[float, float] | None = None
) -> ExtrapolationCheck:
    """Fit the first half of the points (by compute), predict the second half: the errors of that
    prediction are what an extrapolated A is worth."""
    c, r = _points(c, r)
    half = len(c) // 2
    fit = fit_sigmoid(c[:half], r[:half], r0=float(r[0]) if r0 is None else r0, a_range=a_range)
    errors = np.abs(fit.predict(c[half:]) - r[half:])
    return ExtrapolationCheck(fit, float(errors.mean()), float(errors.max()), len(errors))


def intervals_over_seeds(fits: list[SigmoidFit]) -> dict[str, Interval]:
    """Each parameter's mean over the seeds' fits and its t interval; C_mid's on the log scale (its spread
    is multiplicative), given back as the geometric mean and its bounds."""
    if not fits:
        raise ValueError("no fits to summarise")
    out = {}
    for name in ("A", "B", "R0"):
        interval = mean_interval([getattr(f, name) for f in fits])
        bound = any(name in f.at_bound for f in fits)
        out[name] = replace(interval, at_bound=bound) if bound else interval
    log = mean_interval(np.log([f.C_mid for f in fits]))
    out["C_mid"] = Interval(
        float(np.exp(log.value)),
        None if log.low is None else float(np.exp(log.low)),
        None if log.high is None else float(np.exp(log.high)),
        log.n,
        log.confidence,
        f"{log.method} of log C_mid",
        at_bound=any("C_mid" in f.at_bound for f in fits),
    )
    return out


def samples_drawn(steps, steps_per_rollout: int, samples_per_rollout: int) -> np.ndarray:
    """Samples drawn by the time optimizer step `steps` (`[n]`) is logged: a rollout is drawn before its
    first step, so step s has seen ceil(s / steps_per_rollout) rollouts (step 0: none)."""
    if steps_per_rollout < 1 or samples_per_rollout < 1:
        raise ValueError("steps_per_rollout and samples_per_rollout must be >= 1")
    return np.ceil(np.asarray(steps, dtype=float) / steps_per_rollout) * samples_per_rollout


def tokens_drawn(steps, length_steps, mean_lengths, samples_per_rollout: int) -> np.ndarray:
    """Completion tokens drawn by each of `steps` (`[n]`): the running sum over rollouts of their mean
    completion length (`mean_lengths` `[m]`, logged at `length_steps`, the step that ends each rollout)
    times the samples per rollout. A step inside a rollout counts that rollout once its length is logged."""
    ls, ml = np.asarray(length_steps, dtype=float), np.asarray(mean_lengths, dtype=float)
    if ls.shape != ml.shape:
        raise ValueError("length_steps and mean_lengths must be of one length")
    order = np.argsort(ls, kind="stable")
    cumulative = np.concatenate([[0.0], np.cumsum(ml[order]) * samples_per_rollout])
    logged = np.searchsorted(ls[order], np.asarray(steps, dtype=float), side="right")
    return cumulative[logged]
