"""Quantiles of a list of numbers, one function a method, named for it.

Callers name the method they use, so two figures computed differently never share a name:
  quantile_linear        interpolates between order statistics (DuckDB `quantile_cont`, numpy's default, vLLM
                         bench, and AIPerf's arithmetic exactly): the `load` summary and `report`.
  quantile_nearest_rank  the value at rank ceil(q·n), never interpolated (the engine's admission forecasts: a
                         value that was observed).
  quantile_guidellm      GuideLLM's: the first value whose running sum of probabilities, added up in floating
                         point, reaches q. An observed value too, but not always the nearest rank's: for the p50
                         of 30 or 60 values the running sum falls a hair short of 0.5 at rank n/2, so it takes
                         rank n/2 + 1.
quantile_linear and quantile_nearest_rank take values already sorted, ascending; quantile_guidellm takes them in
any order (and weights, as GuideLLM weighs TPOT by output tokens). All take q in [0, 1] and give NaN for no values.
docs/sources.md ("which percentile") says which peer prints which.
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


def quantile_guidellm(values: Sequence[float], q: float, weights: Sequence[float] | None = None) -> float:
    """The `q` quantile as GuideLLM 0.8.1 computes its percentiles (`DistributionSummary.from_values` then
    `Percentiles.from_pdf`, guidellm/schemas/base/statistics.py of the 0.8.1 wheel; the same code at
    vllm-project/guidellm ee7a77457ba668b4b5ccb40f110518829893b36a, src/guidellm/schemas/statistics.py):
    equal values merged, their weights (default 1 each) summed, zero weights dropped; each distinct value's
    probability its weight over the total; the answer is the first value, ascending, whose running sum of those
    probabilities (numpy's `cumsum`: added one after another in float64) is >= q (`searchsorted`, side left).

    The running sum's rounding decides ties: 15 × (1/30) adds up to 0.49999999999999994, so the p50 of 30 values
    is the 16th, where 20 × (1/40) reaches 0.5 and the p50 of 40 is the 20th. Exact for integer weights (GuideLLM's:
    one per request, or token counts); no weight at all gives NaN (GuideLLM prints 0.0); q past the last running sum (only by rounding) gives the largest value,
    where GuideLLM would fail."""
    if not len(values):
        return math.nan
    merged: dict[float, float] = {}
    for v, w in zip(values, weights if weights is not None else [1.0] * len(values), strict=True):
        merged[v] = merged.get(v, 0.0) + float(w)
    distinct = sorted((v, w) for v, w in merged.items() if w > 0)
    if not distinct:  # no weight at all: GuideLLM prints 0.0, the figure of an empty distribution
        return math.nan
    total = sum(w for _, w in distinct)
    if total <= 1e-6:  # GuideLLM's epsilon: no weight to go by, every value counts once
        distinct, total = [(v, 1.0) for v, _ in distinct], float(len(distinct))
    running = 0.0
    for v, w in distinct:
        running += w / total
        if running >= q:
            return v
    return distinct[-1][0]
