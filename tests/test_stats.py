"""budgetscope.stats: the package's quantile functions, one a method; the peers' methods against the figures the
peers' own code prints."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from budgetscope.stats import quantile_guidellm, quantile_linear, quantile_nearest_rank


def test_linear_interpolates_between_order_statistics():
    xs = [1.0, 2.0, 3.0, 4.0]
    assert quantile_linear(xs, 0.5) == 2.5
    assert quantile_linear(xs, 0.99) == pytest.approx(3.97)
    assert quantile_linear(xs, 0) == 1.0 and quantile_linear(xs, 1) == 4.0


def test_nearest_rank_returns_an_observed_value():
    xs = list(range(1, 121))  # 120 values: the p99 is rank ceil(118.8) = 119, never 118.81
    assert quantile_nearest_rank(xs, 0.99) == 119
    assert quantile_linear(xs, 0.99) == pytest.approx(118.81)
    assert quantile_nearest_rank(xs, 0.5) == 60 and quantile_nearest_rank(xs, 0) == 1
    assert quantile_nearest_rank(xs, 1) == 120


def test_no_values_give_nan():
    assert math.isnan(quantile_linear([], 0.5)) and math.isnan(quantile_nearest_rank([], 0.5))
    assert math.isnan(quantile_guidellm([], 0.5))


FIXTURES = Path(__file__).parent / "fixtures" / "tools"


def _values(n: int) -> list[float]:
    """n values in 20-400 (ms), in no order, distinct: the golden-ratio sequence, rounded to 0.1 us."""
    return [round(20.0 + 380.0 * ((i * 0.6180339887498949) % 1.0), 4) for i in range(1, n + 1)]


# (p50, p90, p99) of _values(n) as the peers' own code gives them: GuideLLM 0.8.1's
# `DistributionSummary.from_values(values).percentiles` (guidellm/schemas/base/statistics.py of the PyPI wheel) and
# AIPerf 0.13.0's `metric_result_from_array` (aiperf/metrics/metric_dicts.py of its wheel), each run on these lists
# (numpy 2, Python 3.11, 2026-11-28); the figures as they printed them.
PEERS = {
    1: ((254.8529, 254.8529, 254.8529), (254.8529, 254.8529, 254.8529)),
    2: ((109.7058, 254.8529, 254.8529), (182.27935000000002, 240.33819, 253.401429)),
    7: ((199.4117, 344.5587, 344.5587), (199.4117, 311.29398000000003, 341.23222799999996)),
    30: ((225.5875, 370.7346, 391.9112), (219.04354999999998, 358.95549000000005, 388.11570900000004)),
    40: ((204.4108, 349.5579, 391.9112), (208.4552, 350.36678, 386.806919)),
    60: ((212.4996, 357.6467, 396.9104), (208.4552, 358.14661, 393.960872)),
    1000: ((209.6885, 361.7442, 396.0088), (209.9139, 361.78927999999996, 396.013308)),
}


@pytest.mark.parametrize("n", sorted(PEERS))
def test_each_peers_percentiles_are_its_own_method_to_the_last_bit(n):
    values = _values(n)
    guidellm, aiperf = PEERS[n]
    assert tuple(quantile_guidellm(values, q) for q in (0.5, 0.9, 0.99)) == guidellm
    assert tuple(quantile_linear(sorted(values), q) for q in (0.5, 0.9, 0.99)) == aiperf


@pytest.mark.parametrize("n, rank", [(30, 16), (60, 31), (40, 20), (1000, 500), (2, 1), (7, 4)])
def test_guidellms_median_is_the_rank_its_running_sum_reaches(n, rank):
    # 15 x (1/30) adds up to 0.49999999999999994 < 0.5: GuideLLM's p50 of 30 values is the 16th, nearest rank's the
    # 15th; at 40 the running sum reaches 0.5 exactly, and both take the 20th
    ordered = sorted(_values(n))
    assert quantile_guidellm(ordered[::-1], 0.5) == ordered[rank - 1]
    nearest = quantile_nearest_rank(ordered, 0.5)
    assert (nearest == ordered[rank - 1]) == (n not in (30, 60))


def test_guidellm_merges_equal_values_and_weighs_them():
    # 3 equal values of 1: probability 3/4 at once, so p50 and p75 are 1 and p76 the 2
    assert [quantile_guidellm([2.0, 1.0, 1.0, 1.0], q) for q in (0.5, 0.75, 0.76)] == [1.0, 1.0, 2.0]
    # TPOT as GuideLLM weighs it, by output tokens: one request of 10 ms x 90 tokens, one of 50 ms x 10
    assert quantile_guidellm([50.0, 10.0], 0.9, weights=[10, 90]) == 10.0
    assert quantile_guidellm([50.0, 10.0], 0.91, weights=[10, 90]) == 50.0
    # no weight at all is no value: NaN (GuideLLM prints 0.0 for it)
    assert math.isnan(quantile_guidellm([5.0, 7.0], 0.5, weights=[0, 0]))


def test_guidellms_printed_percentiles_of_a_real_run_are_its_method():
    # the recorded GuideLLM 0.8.1 run (tests/fixtures/tools/): every percentile it printed for TTFT (one value a
    # request) and for TPOT and ITL (weighted by output tokens, and by output tokens - 1), from its own records
    report = json.loads(gzip.decompress((FIXTURES / "guidellm-benchmarks.json.gz").read_bytes()))
    bench = report["benchmarks"][0]
    records = bench["requests"]["successful"]
    cases = {
        "time_to_first_token_ms": ([r["time_to_first_token_ms"] for r in records], None),
        "time_per_output_token_ms": (
            [r["time_per_output_token_ms"] for r in records],
            [r["output_tokens"] for r in records],
        ),
        "inter_token_latency_ms": (
            [r["inter_token_latency_ms"] for r in records],
            [r["output_tokens"] - 1 for r in records],
        ),
    }
    for metric, (values, weights) in cases.items():
        printed = bench["metrics"][metric]["successful"]["percentiles"]
        ours = {key: quantile_guidellm(values, int(key[1:]) / 10 ** (len(key) - 1), weights) for key in printed}
        assert ours == printed, metric
