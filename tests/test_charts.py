"""The dashboard's and postmortem's figures: every axis of labels is categorical, so that labels that look like
numbers ("1", "2-4") are drawn as the buckets they are, beside "unknown"."""

from __future__ import annotations

import pytest

pytest.importorskip("plotly", reason="plotly is not installed (the dashboard extra has it)")

from budgetscope.analysis import charts

BUCKETS = ["1", "2-4", "5-8", "unknown"]


def test_distribution_axis_is_categorical_and_holds_every_bucket():
    d = {
        "dimension": "batch_size",
        "distance": 0.4,
        "values": [{"value": v, "tail_share": 0.25, "body_share": 0.25} for v in BUCKETS],
    }
    fig = charts.distribution_figure(d)
    assert fig.layout.xaxis.type == "category"
    assert [list(t.x) for t in fig.data] == [BUCKETS, BUCKETS]


def test_breakdown_shares_and_gantt_label_axes_are_categorical():
    stages = {"queue": 10.0, "prefill": 5.0}
    a = {
        "tail_mean_ms": stages,
        "body_mean_ms": stages,
        "shares": {"queue": 0.5, "prefill": 0.5},
        "tail_size": 10,
        "body_size": 90,
    }
    assert charts.breakdown_figure(a, "t").layout.yaxis.type == "category"
    assert charts.shares_figure(a, "t").layout.yaxis.type == "category"
    view = {"bars": [{"lane": "1", "name": "1", "start_ms": 0.0, "end_ms": 1.0, "duration_ms": 1.0}], "tokens": []}
    assert charts.gantt_figure(view).layout.yaxis.type == "category"
