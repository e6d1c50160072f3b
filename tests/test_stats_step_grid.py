"""AUC on a declared grid of steps (report.statistics.step_grid): the validation spacing changes it by
interpolation error only, and runs that cannot share a grid are told apart."""

from __future__ import annotations

import numpy as np
import pytest

from twinkle_exp.summary.step_grid import auc_on_grid, grid_span, step_grid


def curve(steps):
    """A smooth learning curve: 30% rising towards 90% with a time constant of 100 steps."""
    return 0.3 + 0.6 * (1 - np.exp(-np.asarray(steps, dtype=float) / 100))


def true_mean(low, high):
    area = 0.9 * (high - low) - 60 * (np.exp(-low / 100) - np.exp(-high / 100))
    return area / (high - low)


def test_two_spacings_of_one_curve_agree_within_the_interpolation_error():
    every_20, every_40 = np.arange(0, 401, 20), np.arange(0, 401, 40)
    grid = step_grid(0, 400)
    a20, a40 = (auc_on_grid(s, curve(s), grid) for s in (every_20, every_40))
    max_curvature = 0.6 / 100**2  # |f''| is largest at step 0
    for h, got in ((20, a20), (40, a40)):
        assert abs(got - true_mean(0, 400)) <= h**2 / 12 * max_curvature  # the bound in the module doc
    assert abs(a20 - a40) < 0.002  # a fifth of an accuracy point


def test_spacings_that_end_at_different_steps_are_scored_on_the_common_span():
    # val_every 40 with max_steps 380 validates last at 360; val_every 20 at 380
    every_20, every_40 = np.arange(0, 381, 20), np.arange(0, 361, 40)
    span = grid_span([(0, 380), (0, 360)])
    assert (span.low, span.high, span.short, span.shared) == (0.0, 360.0, (1,), False)
    grid = step_grid(span.low, span.high)
    a20, a40 = (auc_on_grid(s, curve(s), grid) for s in (every_20, every_40))
    assert abs(a20 - a40) < 0.002
    own_span = np.trapezoid(curve(every_20), every_20) / 380  # each run over its own span, as before
    assert abs(own_span - a40) > 3 * abs(a20 - a40)


def test_the_grid_is_every_step_so_the_area_is_the_interpolants():
    steps, values = np.array([0.0, 10.0, 30.0]), np.array([0.0, 1.0, 0.0])
    assert auc_on_grid(steps, values, step_grid(0, 30)) == pytest.approx((5 + 10) / 30)
    assert len(step_grid(0, 30)) == 31


def test_runs_with_one_span_share_a_grid():
    assert grid_span([(0, 200), (0, 200), (0, 200)]).shared
    late = grid_span([(0, 200), (20, 200)])
    assert not late.shared and late.low == 20 and late.short == (1,)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="leaves the curve"):
        auc_on_grid([0, 100], [0.1, 0.2], step_grid(0, 200))
    with pytest.raises(ValueError, match="increasing"):
        auc_on_grid([0, 100, 50], [0.1, 0.2, 0.3], step_grid(0, 50))
    with pytest.raises(ValueError, match="span"):
        step_grid(100, 100)
    with pytest.raises(ValueError, match="no runs"):
        grid_span([])
    with pytest.raises(ValueError, match="ends before"):
        grid_span([(100, 0)])
