"""The tail explorer on hand-computed archives: the split, every dimension's mixes, and agreement with the
report's contrast."""

from __future__ import annotations

import pytest

from budgetscope.analysis import explore
from budgetscope.analysis.budgets import parse_budgets
from budgetscope.analysis.report import Selection, build_report
from budgetscope.opener import Archive
from otlp_wire import MS, T0, export, jsonl, native_request, span, span_id, trace_id

FAST, SLOW = (("frontend", 2), ("queue", 10), ("prefill", 50)), (("frontend", 2), ("queue", 510), ("prefill", 50))


@pytest.fixture
def archive(archive_path, ingest_text):
    # 30 fast requests of tenant a (TTFT 62 ms) and 10 slow ones of tenant b (562 ms), one every 100 ms.
    # Before every request an engine step: batch size 2 ahead of a fast one, 20 ahead of a slow one.
    docs = []
    for i in range(40):
        slow = i >= 30
        arrival = T0 + i * 100 * MS
        docs.append(
            export(
                native_request(
                    arrival=arrival,
                    tenant="b" if slow else "a",
                    stages=(SLOW if slow else FAST) + (("decode", 100), ("postprocess", 1)),
                )[1],
                service="engine",
            )
        )
        docs.append(
            export(
                [
                    span(
                        trace_id(),
                        span_id(),
                        "engine.step",
                        arrival - 5 * MS,
                        arrival - 4 * MS,
                        attributes={"budgetscope.step.batch_size": 20 if slow else 2},
                    )
                ],
                service="engine",
            )
        )
    ingest_text(archive_path, jsonl(*docs))
    return archive_path


def test_split_matches_the_attribution(archive):
    with Archive(archive, read_only=True) as a:
        sp = explore.split(a.con, Selection({"tier": "interactive"}), "ttft_ms", 0.75)
        none = explore.split(a.con, Selection({"tier": "nope"}), "ttft_ms", 0.75)
    # p75 = 62 + 0.25 * 500 = 187: the tail is the 10 slow; the median is 62: the body the 30 fast
    assert (sp.requests, sp.tail_size, sp.body_size, sp.widened) == (40, 10, 30, False)
    assert sp.threshold_ms == pytest.approx(187) and sp.median_ms == pytest.approx(62)
    assert sp.tail_min_ms == pytest.approx(562)
    assert none is None


def test_split_widens_to_the_ten_slowest(archive_path, ingest_text):
    # TTFT 2, 3, …, 21 ms: p90 = 19.1 holds 2 requests, so the tail is the 10 slowest (12 … 21 ms)
    docs = [
        export(native_request(arrival=T0 + i * MS, stages=(("queue", i + 1), ("prefill", 1)))[1]) for i in range(20)
    ]
    ingest_text(archive_path, jsonl(*docs))
    with Archive(archive_path, read_only=True) as a:
        sp = explore.split(a.con, Selection({}), "ttft_ms", 0.9)
    assert (sp.tail_size, sp.widened, sp.body_size) == (10, True, 10)
    assert (sp.threshold_ms, sp.tail_min_ms, sp.median_ms) == pytest.approx((19.1, 12, 11.5))


def test_every_dimension_ranked_with_both_mixes(archive):
    with Archive(archive, read_only=True) as a:
        sel = Selection({"tier": "interactive"})
        dists = explore.distributions(a.con, sel, explore.split(a.con, sel, "ttft_ms", 0.75))
    by = {d["dimension"]: d for d in dists}
    assert [d["dimension"] for d in dists[:2]] == ["batch_size", "tenant"]  # both 1.0; ties by name
    assert by["tenant"]["distance"] == pytest.approx(1.0) and by["tenant"]["top_value"] == "b"
    assert by["tenant"]["values"] == [
        {"value": "a", "tail": 0, "body": 30, "tail_share": 0.0, "body_share": 1.0},
        {"value": "b", "tail": 10, "body": 0, "tail_share": 1.0, "body_share": 0.0},
    ]
    assert [v["value"] for v in by["batch_size"]["values"]] == ["2-4", "17-32"]  # bucket order, not by name
    assert by["prompt_length"]["distance"] == 0.0 and by["tier"]["values"][0]["value"] == "interactive"
    assert set(by) == set(explore.DIMENSIONS)


def test_agrees_with_the_report_contrast(archive):
    budgets = parse_budgets("[tiers.interactive]\npercentile = 75\nttft_ms = 100\n")
    with Archive(archive, read_only=True) as a:
        rep = build_report(a.con, budgets)["tiers"][0]
        sel = Selection({"tier": "interactive"})
        dists = explore.distributions(a.con, sel, explore.split(a.con, sel, "ttft_ms", 0.75))
    for c in rep["contrast"]["ttft"]:
        d = next(d for d in dists if d["dimension"] == c["dimension"])
        v = next(v for v in d["values"] if v["value"] == c["value"])
        assert (d["distance"], d["top_value"], v["tail_share"], v["body_share"]) == pytest.approx(
            (c["distance"], c["value"], c["tail_share"], c["body_share"])
        )


def test_no_engine_steps_means_no_batch_dimension(archive_path, ingest_text):
    ingest_text(archive_path, jsonl(*[export(native_request(arrival=T0 + i * MS)[1]) for i in range(12)]))
    with Archive(archive_path, read_only=True) as a:
        sel = Selection({})
        dists = explore.distributions(a.con, sel, explore.split(a.con, sel, "e2e_ms", 0.99))
    assert "batch_size" not in {d["dimension"] for d in dists}
