"""Plain OpenTelemetry HTTP client spans (kind CLIENT, `http.*` / `url.*` / `server.*` attributes, as the httpx,
requests and aiohttp instrumentations write them) that are the parent of a server root span join as its client
span: network derived, `has_client_span` true, client TTFT unknown unless the span carries a first-token time.
Figures computed by hand from the spans below.
"""

from __future__ import annotations

import pytest

from budgetscope.analysis.budgets import parse_budgets
from budgetscope.analysis.report import build_report
from budgetscope.opener import Archive
from conftest import rows
from otlp_wire import MS, T0, export, jsonl, native_request, span, span_id

OLD = {"http.method": "POST", "http.url": "http://engine:8000/v1/completions", "http.status_code": 200}
STABLE = {
    "http.request.method": "POST",
    "url.full": "http://engine:8000/v1/completions",
    "server.address": "engine",
    "server.port": 8000,
    "http.response.status_code": 200,
}
# every request: frontend 2, queue 10, prefill 50, decode 400, postprocess 3 → server TTFT 62, E2E 465 ms
STAGES = (("frontend", 2), ("queue", 10), ("prefill", 50), ("decode", 400), ("postprocess", 3))


def http_request(
    arrival: int, up_ms: float, down_ms: float, attributes: dict, name: str = "POST", kind: int = 3
) -> list[dict]:
    """A native request whose root is the child of an HTTP client span starting `up_ms` before it and ending
    `down_ms` after it."""
    tid, spans = native_request(arrival=arrival, stages=STAGES)
    root, cid = spans[0], span_id()
    root["parentSpanId"] = cid
    spans.append(
        span(
            tid,
            cid,
            name,
            arrival - int(up_ms * MS),
            int(root["endTimeUnixNano"]) + int(down_ms * MS),
            kind=kind,
            attributes=attributes,
        )
    )
    return spans


def _one(archive_path, ingest_text, spans, cols: str) -> tuple:
    ingest_text(archive_path, jsonl(export(spans)))
    (r,) = rows(archive_path, f"SELECT {cols} FROM requests")
    return r


COLS = (
    "has_client_span, client_sent_ns, client_end_ns, client_e2e_ms, network_ms, client_ttft_ms, "
    "ttft_network_ms, client_tpot_ms, http_status, e2e_ms"
)


@pytest.mark.parametrize("attributes", [OLD, STABLE], ids=["old-names", "stable-names"])
@pytest.mark.parametrize("name", ["POST", "POST /v1/completions"])
def test_an_http_client_span_is_the_request_s_client_span(attributes, name, archive_path, ingest_text):
    spans = http_request(T0, 4, 6, attributes, name)
    got = _one(archive_path, ingest_text, spans, COLS)
    # client [T0 − 4, T0 + 465 + 6] ms: E2E 475, network 475 − 465 = 10; no first token on the span
    assert got == (
        True,
        T0 - 4 * MS,
        T0 + 471 * MS,
        pytest.approx(475.0),
        pytest.approx(10.0),
        None,
        None,
        None,
        200,
        pytest.approx(465.0),
    )
    assert rows(archive_path, "SELECT source, count(*) FROM spans WHERE kind = 'CLIENT' GROUP BY 1") == [("client", 1)]


def test_a_first_token_time_on_the_span_gives_the_client_ttft(archive_path, ingest_text):
    spans = http_request(T0, 4, 6, STABLE | {"budgetscope.client.first_token_unix_nano": T0 + 65 * MS})
    got = _one(archive_path, ingest_text, spans, "client_ttft_ms, ttft_network_ms, client_tpot_ms")
    # client TTFT = 65 + 4 = 69; server TTFT 62 → 7 ms; client TPOT = (471 − 65) / 40 tokens
    assert got == pytest.approx((69.0, 7.0, 406.0 / 40))


def test_a_span_that_ended_at_the_response_headers_leaves_the_end_unknown(archive_path, ingest_text):
    """httpx and aiohttp end the span when the headers arrive: for a streamed response, before the server ends."""
    spans = http_request(T0, 4, -400, STABLE)  # ends 65 ms after the server received it, 400 ms before its end
    got = _one(archive_path, ingest_text, spans, COLS)
    assert got == (True, T0 - 4 * MS, None, None, None, None, None, None, 200, pytest.approx(465.0))


@pytest.mark.parametrize("case", ["child-of-the-server", "internal-kind", "no-http-method", "alone"])
def test_other_client_spans_are_no_request_s_client(case, archive_path, ingest_text):
    tid, spans = native_request(arrival=T0, stages=STAGES)
    root = spans[0]
    if case == "child-of-the-server":  # the server calling another API while it serves the request
        spans.append(
            span(
                tid,
                span_id(),
                "GET",
                T0 + MS,
                T0 + 2 * MS,
                parent=root["spanId"],
                kind=3,
                attributes=STABLE | {"http.request.method": "GET"},
            )
        )
    elif case in ("internal-kind", "no-http-method"):
        cid = span_id()
        root["parentSpanId"] = cid
        kind, attributes = (1, STABLE) if case == "internal-kind" else (3, {"rpc.system": "grpc"})
        spans.append(span(tid, cid, "POST", T0 - 4 * MS, T0 + 471 * MS, kind=kind, attributes=attributes))
    else:  # an HTTP client span in a trace with no server span at all
        tid2 = "0af7651916cd43dd8448eb211c80319c"
        spans.append(span(tid2, span_id(), "GET", T0, T0 + 30 * MS, kind=3, attributes=OLD))
    ingest_text(archive_path, jsonl(export(spans)))
    assert rows(archive_path, "SELECT has_client_span, network_ms, http_status FROM requests") == [(False, None, None)]


def test_the_report_uses_the_client_e2e_and_the_server_ttft(archive_path, ingest_text):
    """100 requests behind HTTP client spans, 5 with 500 ms more downlink: E2E by client figures (network in
    the attribution), TTFT by server figures (the spans have no first token), attainment by each request's best
    figure."""
    docs = [export(http_request(T0 + i * 1000 * MS, 5, 503 if i % 20 == 0 else 3, OLD)) for i in range(100)]
    ingest_text(archive_path, jsonl(*docs))
    budgets = parse_budgets("[tiers.interactive]\npercentile = 90\nttft_ms = 100\ne2e_ms = 600\n")
    with Archive(archive_path, read_only=True, create=False) as a:
        (t,) = build_report(a.con, budgets)["tiers"]
    assert t["figures_by_kind"] == {"ttft": "server", "e2e": "client"} and t["figures"] == "server"
    assert t["requests_without_client_span"] == 0
    assert t["metrics"]["ttft_ms"]["column"] == "ttft_ms" and t["metrics"]["ttft_ms"]["p90"] == pytest.approx(62.0)
    assert t["metrics"]["e2e_ms"]["column"] == "client_e2e_ms"
    assert "network" not in t["stages"]  # the network stage budget is in the TTFT window, unknown here
    # E2E: 95 requests at 473 ms (network 8), 5 at 973 (network 508); p90 = 473, so every request is in the
    # tail (mean network 33) and the body is the 95 (mean 8): the whole excess is network
    e2e = t["attribution"]["e2e"]
    assert e2e["metric"] == "client_e2e_ms" and e2e["dominant"] == "network"
    assert e2e["shares"]["network"] == pytest.approx(1.0)
    assert e2e["tail_mean_ms"]["network"] == pytest.approx(33.0) and e2e["body_mean_ms"]["network"] == pytest.approx(
        8.0
    )
    ttft = t["attribution"]["ttft"]
    assert ttft["metric"] == "ttft_ms" and "network" not in ttft["tail_mean_ms"]
    assert t["attainment"] == pytest.approx(0.95)  # server TTFT 62 ≤ 100 for all; client E2E 973 > 600 for 5
