"""Plots that do not overstate: a y axis at least 0.05 tall (5 points on a percent scale), kept
inside the score's own range, and error bars cut where that range ends."""

from __future__ import annotations

import pytest

from weightsearch.studies.plots import clipped_errors, metric_bounds, y_limits


def test_a_difference_of_thousandths_is_drawn_on_a_tall_enough_axis():
    low, high = y_limits([0.4040, 0.4065], metric_bounds("accuracy", False), False)
    assert high - low >= 0.05 and low < 0.4040 and high > 0.4065


def test_an_accuracy_axis_and_its_error_bars_stop_at_one():
    bounds = metric_bounds("accuracy", False)
    assert bounds == (0.0, 1.0)
    below, above = clipped_errors([0.99, 0.5], [0.05, 0.05], bounds)
    assert above == pytest.approx([0.01, 0.05]) and below == pytest.approx([0.05, 0.05])
    low, high = y_limits([0.94, 1.0, 0.45, 0.55], bounds, False)
    assert high == 1.0 and low < 0.45


def test_correlations_may_go_negative_and_percent_scales_multiply():
    assert metric_bounds("pearson_spearman_mean", False) == (-1.0, 1.0)
    assert metric_bounds("mcc", True) == (-100.0, 100.0)
    assert metric_bounds("accuracy", True) == (0.0, 100.0)
    low, high = y_limits([-0.99, -0.98], (-1.0, 1.0), False)
    assert low == -1.0 and high - low >= 0.05
    assert y_limits([70.1, 70.2], (0.0, 100.0), True)[1] - y_limits(
        [70.1, 70.2], (0.0, 100.0), True)[0] >= 5.0


def test_a_metric_without_known_bounds_keeps_its_bars_whole():
    assert metric_bounds("loss", False) is None
    assert clipped_errors([2.0], [0.5], None) == [[0.5], [0.5]]
    low, high = y_limits([1.5, 2.5], None, False)
    assert low < 1.5 and high > 2.5
