"""The report's additive `filters`: model, tenant, instance and tier narrow it; without them nothing changes."""

from __future__ import annotations

import pytest

from budgetscope.analysis.budgets import parse_budgets
from budgetscope.analysis.report import Selection, build_report
from budgetscope.opener import Archive
from otlp_wire import MS, T0, export, jsonl, native_request

BUDGETS = parse_budgets("[tiers.interactive]\nttft_ms = 100\n[tiers.batch]\nttft_ms = 1000\n")


@pytest.fixture
def archive(archive_path, ingest_text):
    # tenant a: 10 fast (62 ms) on model m1; tenant b: 10 slow (262 ms) on model m2; 5 batch requests, no tenant
    docs = [export(native_request(arrival=T0 + i * 10 * MS, tenant="a", model="m1")[1]) for i in range(10)]
    docs += [
        export(
            native_request(
                arrival=T0 + (10 + i) * 10 * MS,
                tenant="b",
                model="m2",
                stages=(("frontend", 2), ("queue", 210), ("prefill", 50), ("decode", 10)),
            )[1]
        )
        for i in range(10)
    ]
    docs += [export(native_request(arrival=T0 + (20 + i) * 10 * MS, tier="batch")[1]) for i in range(5)]
    ingest_text(archive_path, jsonl(*docs))
    return archive_path


def _report(archive, **kw):
    with Archive(archive, read_only=True) as a:
        return build_report(a.con, BUDGETS, **kw)


def test_no_filters_changes_nothing(archive):
    plain, empty = _report(archive), _report(archive, filters={})
    assert "filters" not in plain and empty.pop("filters") == {}
    assert plain == empty


def test_tenant_and_model_filters_narrow_every_tier(archive):
    a = _report(archive, filters={"tenant": "a"})
    inter = a["tiers"][0]
    assert (inter["requests"], inter["metrics"]["ttft_ms"]["p99"]) == (10, pytest.approx(62))
    assert a["tiers"][1]["requests"] == 0 and a["filters"] == {"tenant": "a"}
    b = _report(archive, filters={"model": ["m2"], "tenant": ["a", "b"]})
    assert b["tiers"][0]["requests"] == 10 and b["tiers"][0]["metrics"]["ttft_ms"]["p50"] == pytest.approx(262)
    none_tenant = _report(archive, filters={"tenant": [None]})
    assert [t["requests"] for t in none_tenant["tiers"]] == [0, 5]


def test_tier_filter_leaves_other_tiers_out(archive):
    rep = _report(archive, filters={"tier": "batch"})
    assert [t["name"] for t in rep["tiers"]] == ["batch"] and rep["tiers"][0]["requests"] == 5
    assert rep["unbudgeted_tiers"] == {}


def test_unknown_filter_column_is_refused():
    with pytest.raises(ValueError, match="cannot filter"):
        Selection({}, extra={"outcome; --": "x"})
    assert Selection({}, extra={"tenant": []}).where() == "WHERE false"
