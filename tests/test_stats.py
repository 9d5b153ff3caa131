"""budgetscope.stats: the package's quantile functions, one a method."""

from __future__ import annotations

import math

import pytest

from budgetscope.stats import quantile_linear, quantile_nearest_rank


def test_linear_interpolates_between_order_statistics():
    xs = [1.0, 2.0, 3.0, 4.0]
    assert quantile_linear(xs, 0.5) == 2.5
    assert quantile_linear(xs, 0.99) == pytest.approx(3.97)
    assert quantile_linear(xs, 0) == 1.0 and quantile_linear(xs, 1) == 4.0


def test_nearest_rank_returns_an_observed_value():
    xs = list(range(1, 121))  # 120 values: GuideLLM's p99 of them is rank ceil(118.8) = 119, never 118.81
    assert quantile_nearest_rank(xs, 0.99) == 119
    assert quantile_linear(xs, 0.99) == pytest.approx(118.81)
    assert quantile_nearest_rank(xs, 0.5) == 60 and quantile_nearest_rank(xs, 0) == 1
    assert quantile_nearest_rank(xs, 1) == 120


def test_no_values_give_nan():
    assert math.isnan(quantile_linear([], 0.5)) and math.isnan(quantile_nearest_rank([], 0.5))
