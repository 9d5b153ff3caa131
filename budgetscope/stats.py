"""Quantiles of a list of numbers, one function a method, named for it.

Callers name the method they use, so two figures computed differently never share a name:
  quantile_linear        interpolates between order statistics (DuckDB `quantile_cont`, numpy's default,
                         vLLM bench and AIPerf): the `load` summary and `report`.
  quantile_nearest_rank  the value at rank ceil(q·n), never interpolated (GuideLLM's percentiles, the engine's
                         admission forecasts: a value that was observed).
Both take values already sorted, ascending, and q in [0, 1]; both give NaN for no values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def quantile_linear(sorted_values: Sequence[float], q: float) -> float:
    """The `q` quantile by linear interpolation between the order statistics at ranks floor and ceil of q·(n−1)."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    pos = q * (n - 1)
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def quantile_nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """The `q` quantile by nearest rank: the value at 1-based rank ceil(q·n) (the smallest for q = 0)."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    return sorted_values[max(math.ceil(q * n) - 1, 0)]
