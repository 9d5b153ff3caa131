"""One request's Gantt and token gaps, on a hand-built request."""

from __future__ import annotations

import pytest

from budgetscope.analysis import request_view
from budgetscope.analysis.report import Selection
from budgetscope.opener import Archive
from otlp_wire import MS, T0, export, jsonl, native_request

STAGES = (("frontend", 2), ("queue", 10), ("prefill", 50), ("decode", 30), ("postprocess", 3))


def test_gantt_bars_network_segments_and_token_times(archive_path, ingest_text):
    tid, spans = native_request(arrival=T0, stages=STAGES, client=(5, 7), output_tokens=4, itl=[10.0, 10.0, 10.0])
    ingest_text(archive_path, jsonl(export(spans)))
    with Archive(archive_path, read_only=True) as a:
        v = request_view.request_view(a.con, tid)
        assert request_view.request_view(a.con, "no-such-request") is None
    assert v["t0_ns"] == T0 - 5 * MS  # the client send
    bars = {(b["lane"], b["name"]): (b["start_ms"], b["end_ms"]) for b in v["bars"]}
    assert bars[("client", "llm.client.request")] == (0, pytest.approx(107))  # 5 up + 95 server + 7 down
    assert bars[("server", "llm.request")] == (5, 100)
    assert bars[("stage: queue", "stage.queue")] == (7, 17)
    assert bars[("stage: prefill", "stage.prefill")] == (17, 67)
    assert bars[("network", "uplink")] == (0, 5) and bars[("network", "downlink")] == (100, pytest.approx(107))
    server = [t for t in v["tokens"] if t["side"] == "server"]
    assert [t["t_ms"] for t in server] == pytest.approx([67, 77, 87, 97])  # first token, then the gaps
    assert [t["gap_ms"] for t in server] == [None, 10.0, 10.0, 10.0]
    assert v["request"]["output_tokens"] == 4


def test_without_client_span_says_what_is_unknown(archive_path, ingest_text):
    tid, spans = native_request(arrival=T0, stages=STAGES)
    ingest_text(archive_path, jsonl(export(spans)))
    with Archive(archive_path, read_only=True) as a:
        rid = request_view.slowest_requests(a.con, Selection({}), "e2e_ms")[0][0]
        v = request_view.request_view(a.con, rid)
    assert v["t0_ns"] == T0 and not [b for b in v["bars"] if b["lane"] in ("client", "network")]
    assert any("no client span" in m for m in v["missing"])
    assert any("no server inter-token gaps" in m for m in v["missing"])


def test_slowest_requests_rank_by_a_column(archive_path, ingest_text):
    docs = [
        export(native_request(arrival=T0 + i * 100 * MS, stages=(("queue", q), ("prefill", 5)))[1])
        for i, q in enumerate([30, 10, 20])
    ]
    ingest_text(archive_path, jsonl(*docs))
    with Archive(archive_path, read_only=True) as a:
        got = request_view.slowest_requests(a.con, Selection({}), "ttft_ms", limit=2)
        with pytest.raises(ValueError):
            request_view.slowest_requests(a.con, Selection({}), "1; DROP TABLE requests")
    assert [v for _, v in got] == pytest.approx([35, 25])
