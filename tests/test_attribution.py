"""Attribution math on small hand-computed cases (docs/design.md, "Attribution")."""

from __future__ import annotations

import pytest

from budgetscope.analysis import attribution
from budgetscope.analysis.budgets import parse_budgets
from budgetscope.analysis.report import build_report
from conftest import rows
from otlp_wire import MS, T0, export, jsonl, native_request


def test_shares_sum_to_one_and_name_the_dominant_stage():
    sh = attribution.shares(
        {"queue": 110.0, "prefill": 60.0, "network": 10.0}, {"queue": 10.0, "prefill": 50.0, "network": 10.0}
    )
    assert sh.shares == {"queue": pytest.approx(100 / 110), "prefill": pytest.approx(10 / 110), "network": 0.0}
    assert sum(sh.shares.values()) == pytest.approx(1.0)
    assert (sh.dominant, sh.verdict, sh.top) == ("queue", "dominated", ["queue", "prefill"])


def test_mixed_verdict_names_the_top_two():
    sh = attribution.shares({"a": 42.0, "b": 110.0, "c": 155.0}, {"a": 2.0, "b": 10.0, "c": 50.0})
    assert sh.shares == {"a": pytest.approx(40 / 245), "b": pytest.approx(100 / 245), "c": pytest.approx(105 / 245)}
    assert (sh.dominant, sh.verdict, sh.top) == ("c", "mixed", ["c", "b"])


def test_a_stage_faster_in_the_tail_gets_a_negative_share():
    sh = attribution.shares({"queue": 200.0, "prefill": 40.0}, {"queue": 10.0, "prefill": 50.0})
    assert sh.shares == {"queue": pytest.approx(190 / 180), "prefill": pytest.approx(-10 / 180)}


def test_no_excess_means_nothing_to_attribute():
    sh = attribution.shares({"queue": 5.0}, {"queue": 5.0})
    assert (sh.shares, sh.dominant, sh.verdict, sh.top) == (None, None, None, [])


def _ingest(archive_path, ingest_text, specs, client=None):
    docs = []
    for i, (f, q, p) in enumerate(specs):
        _, s = native_request(
            arrival=T0 + i * 1000 * MS,
            stages=(("frontend", f), ("queue", q), ("prefill", p), ("decode", 100), ("postprocess", 1)),
            client=client(i) if client else None,
        )
        docs.append(export(s))
    ingest_text(archive_path, jsonl(*docs))


BUDGETS = "[tiers.interactive]\npercentile = {p}\nttft_ms = 100\n"


def test_tail_widens_to_the_ten_slowest_and_is_mixed(archive_path, ingest_text):
    # 10 normal (2+10+50 = 62 ms), 5 slow by queue (42+210+60 = 312), 5 slow by prefill (42+10+250 = 302).
    # p99 = 312 holds 5 requests < 10, so the tail is the 10 slowest; median = 182, so the body is the 10 normal.
    # Tail means: frontend 42, queue 110, prefill 155; body: 2, 10, 50 → excess 40, 100, 105 of 245.
    _ingest(archive_path, ingest_text, [(2, 10, 50)] * 10 + [(42, 210, 60)] * 5 + [(42, 10, 250)] * 5)
    from budgetscope.opener import Archive

    with Archive(archive_path, read_only=True) as a:
        rep = build_report(a.con, parse_budgets(BUDGETS.format(p=99)))
    ttft = rep["tiers"][0]["attribution"]["ttft"]
    assert (ttft["metric"], ttft["tail_size"], ttft["tail_widened"], ttft["body_size"]) == ("ttft_ms", 10, True, 10)
    assert ttft["threshold_ms"] == pytest.approx(312) and ttft["median_ms"] == pytest.approx(182)
    assert ttft["shares"] == {
        "frontend": pytest.approx(40 / 245),
        "queue": pytest.approx(100 / 245),
        "prefill": pytest.approx(105 / 245),
        "unaccounted": pytest.approx(0, abs=1e-9),
    }
    assert (ttft["dominant"], ttft["verdict"], ttft["top"]) == ("prefill", "mixed", ["prefill", "queue"])
    assert "network" not in ttft["shares"]
    assert "the tail is the 10 slowest requests" in rep["tiers"][0]["verdict"]


def test_dominated_tail_attainment_and_exit_state(archive_path, ingest_text):
    # 30 normal (62 ms), 10 slow by queue (562 ms). p75 = 62 + 0.25 * 500 = 187: tail = the 10 slow.
    _ingest(archive_path, ingest_text, [(2, 10, 50)] * 30 + [(2, 510, 50)] * 10)
    from budgetscope.opener import Archive

    with Archive(archive_path, read_only=True) as a:
        rep = build_report(a.con, parse_budgets(BUDGETS.format(p=75)))
    (t,) = rep["tiers"]
    ttft = t["attribution"]["ttft"]
    assert (ttft["tail_size"], ttft["tail_widened"], ttft["body_size"]) == (10, False, 30)
    assert ttft["shares"]["queue"] == pytest.approx(1.0)
    assert (ttft["dominant"], ttft["verdict"]) == ("queue", "dominated")
    assert t["metrics"]["ttft_ms"]["p75"] == pytest.approx(187)
    assert t["attainment"] == pytest.approx(0.75)
    assert t["kept"] is False and rep["kept"] is False
    assert t["breaches"] == [
        {"kind": "metric", "name": "ttft_ms", "value": pytest.approx(187), "budget": 100.0, "quantile": "p75"}
    ]


def test_network_is_attributed_only_when_every_request_has_a_client_span(archive_path, ingest_text, tmp_path):
    from budgetscope.opener import Archive

    # slow requests also have a slow uplink: 20 ms more network in the tail
    _ingest(
        archive_path,
        ingest_text,
        [(2, 10, 50)] * 30 + [(2, 510, 50)] * 10,
        client=lambda i: (25.0, 3.0) if i >= 30 else (5.0, 3.0),
    )
    with Archive(archive_path, read_only=True) as a:
        (t,) = build_report(a.con, parse_budgets(BUDGETS.format(p=75)))["tiers"]
    ttft = t["attribution"]["ttft"]
    assert ttft["metric"] == "client_ttft_ms" and t["figures"] == "client"
    assert ttft["shares"]["network"] == pytest.approx(20 / 520)
    assert ttft["shares"]["queue"] == pytest.approx(500 / 520)
    assert sum(ttft["shares"].values()) == pytest.approx(1.0)

    other = tmp_path / "partial.duckdb"
    _ingest(other, ingest_text, [(2, 10, 50)] * 30 + [(2, 510, 50)] * 10, client=lambda i: (5.0, 3.0) if i else None)
    with Archive(other, read_only=True) as a:
        (t,) = build_report(a.con, parse_budgets(BUDGETS.format(p=75)))["tiers"]
    assert "network" not in t["attribution"]["ttft"]["shares"] and "network" not in t["stages"]
    assert t["requests_without_client_span"] == 1 and t["figures"] == "server"
    assert "Network time is unknown: 1 of 40 requests have no client span" in t["verdict"]


def test_a_request_that_did_not_end_ok_misses_its_slo(archive_path, ingest_text):
    _ingest(archive_path, ingest_text, [(2, 10, 50)] * 3)
    _, s = native_request(
        arrival=T0 + 9000 * MS, stages=(("frontend", 1),), extra_root={"budgetscope.outcome": "rejected"}
    )
    ingest_text(archive_path, jsonl(export(s)))
    from budgetscope.opener import Archive

    with Archive(archive_path, read_only=True) as a:
        (t,) = build_report(a.con, parse_budgets(BUDGETS.format(p=99)))["tiers"]
    assert (t["requests"], t["ok_requests"], t["outcomes"]) == (4, 3, {"ok": 3, "rejected": 1})
    assert t["attainment"] == pytest.approx(0.75)
    assert rows(archive_path, "SELECT outcome, ttft_ms FROM requests WHERE outcome <> 'ok'") == [("rejected", None)]


def test_tail_label_says_mixed_when_no_stage_holds_half():
    """The demo's summary: "TTFT: queue" only when queueing dominates; the long-prompts run that was queue 50 %,
    prefill 48 % reads mixed."""
    dominated = {
        "shares": {"queue": 0.8, "prefill": 0.2},
        "dominant": "queue",
        "verdict": "dominated",
        "top": ["queue", "prefill"],
    }
    mixed = {
        "shares": {"queue": 0.496, "prefill": 0.48, "decode": 0.024},
        "dominant": "queue",
        "verdict": "mixed",
        "top": ["queue", "prefill"],
    }
    assert attribution.tail_label(dominated) == "queue"
    assert attribution.tail_label(mixed) == "mixed (queue 50%, prefill 48%)"
    assert (
        attribution.tail_label({"shares": None, "dominant": None, "verdict": None, "top": []})
        == "no tail (no slower than the body)"
    )
    assert attribution.tail_label(None) == "no tail (no slower than the body)"
