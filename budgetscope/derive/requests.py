"""Assemble `requests` rows: every adapter's server rows, joined to their client span, with derived metrics.

The client span `llm.client.request` is the parent of the server root (W3C traceparent), so the join is
(trace_id, client span_id = server parent_span_id). An imported client record (AIPerf, GuideLLM) carries no trace
context: `budgetscope import` puts it in the trace of the server row whose request id it recorded (joins.py), and
it joins by (trace_id, client `budgetscope.client.request_id` = server `request_id`). Network is derived only
where a client span exists:
  network_ms      = client E2E − server E2E   (uplink + downlink over the whole request)
  ttft_network_ms = client TTFT − server TTFT (the network part of the client's TTFT); for a client whose TTFT
                    waits for the first non-empty chunk (AIPerf, GuideLLM), its first event of any kind − server
                    TTFT, NULL where the export lacks it (AIPerf's records)

Server rows come in three kinds, and a request (a client span) gets the first kind that claims it:
  1. span adapters (`SPAN_ADAPTERS`): the server sent its own spans, children of the client span;
  2. reported adapters (`REPORTED_ADAPTERS`): the server sent no span but reported timings in its response,
     which the load generator kept on the client span (llama.cpp `timings`, TGI `x-*-time` headers);
  3. the client-only adapter (`derive/client.py`): nothing but the client span.
Rows of kinds 2 and 3 have no server timeline (`server_span_id` NULL). Where their server E2E is unknown too,
network cannot be split from unreported server time, so `network_ms` is NULL and `unaccounted_ms` is the
client figure minus the stages the server did report: unknown time is shown as unaccounted, never guessed.

A plain OpenTelemetry HTTP client span (kind CLIENT with `http.request.method` or `http.method`, as the httpx,
requests and aiohttp instrumentations write it) joins as the client span too, but only as the direct parent of
a server row: one that is parent of nothing a server adapter claimed never becomes a request. It carries no
first-token time, so the client TTFT (and `ttft_network_ms`, `client_tpot_ms`) stay NULL unless it does
(`budgetscope.client.first_token_unix_nano`). httpx and aiohttp end the span when the response headers arrive:
for a streamed response it ends before the server span, and then the client end, E2E and network are NULL
(unknown), never a negative network time.

Replicas: the server root span's resource gives `service_instance_id`, `host_name` and `k8s_pod_name`
(schema.REPLICA_COLUMNS), for every adapter at once; rows without a server span have them NULL.
"""

from __future__ import annotations

from budgetscope.derive import client, instants, invariants, llamacpp, native, sglang, tgi, triton, unread_events, vllm
from budgetscope.derive.classify import CLIENT_ROOT_SQL, HTTP_CLIENT_SQL
from budgetscope.derive.client import FIRST_EVENT, FIRST_TOKEN_DEFINITION, ID_ATTR, NONEMPTY_CHUNK, TOKEN_EVENT
from budgetscope.schema import REPLICA_COLUMNS, REQUESTS

ADAPTERS = (native, vllm)
"""The original span adapters (kept for callers that list them)."""
SPAN_ADAPTERS = (
    ("native", native.server_rows),
    ("vllm", vllm.server_rows),
    ("tgi", tgi.span_rows),
    ("sglang", sglang.server_rows),
    ("triton", triton.server_rows),
)
"""Each span adapter, with the `spans.source` it reads (derive/classify.py)."""
REPORTED_ADAPTERS = (llamacpp.server_rows, tgi.header_rows)
"""These read client spans (`source` 'client')."""

CLIENT_ATTRS = (
    '{"budgetscope.client.scheduled_unix_nano":"BIGINT","budgetscope.client.first_token_unix_nano":"BIGINT",'
    '"budgetscope.client.itl_ms":"DOUBLE[]","http.response.status_code":"INTEGER","http.status_code":"INTEGER",'
    '"budgetscope.client.request_id":"VARCHAR","budgetscope.client.first_token_definition":"VARCHAR",'
    '"budgetscope.client.first_event_unix_nano":"BIGINT"}'
)
"""The client span attributes the derivation reads; `http.status_code` is the HTTP conventions' old name."""

CLIENT_E2E_RAW = "(c.end_ns - c.start_ns) / 1e6"
"""The client's E2E as its span timed it."""
CLIENT_END = (
    f"CASE WHEN s.server_span_id IS NULL OR {invariants.client_view_ok(CLIENT_E2E_RAW, 's.e2e_ms')} THEN c.end_ns END"
)
"""When the client had the whole response: a client span shorter than the server span's E2E did not time the
response's end (an HTTP client span of a streamed response ended at its headers): no client end
(derive/invariants.py). A server's reported E2E (a header) is not its clock: there the row is only flagged."""
CLIENT_FIRST_EVENT = (
    f"CASE WHEN c.a.\"{FIRST_TOKEN_DEFINITION}\" = '{NONEMPTY_CHUNK}' "
    f'THEN c.a."{FIRST_EVENT}" ELSE c.a."budgetscope.client.first_token_unix_nano" END'
)
"""The client's first stream event of any kind, ns: the time comparable with the server's first token. A tool that
waits for the first non-empty chunk (AIPerf, GuideLLM) adds the server's empty chunks to its TTFT; only its first
event, where the export has it, is network-comparable (NULL where it lacks it: AIPerf's records alone)."""
CLIENT_TTFT_RAW = f"({CLIENT_FIRST_EVENT} - c.start_ns) / 1e6"
"""The client's TTFT to its first stream event, as its span gave it."""
CONTENT_GAP = (
    'CASE WHEN c.a."budgetscope.client.first_token_unix_nano" IS NOT NULL THEN '
    f"CASE WHEN c.a.\"{FIRST_TOKEN_DEFINITION}\" = '{NONEMPTY_CHUNK}' "
    f'THEN (c.a."budgetscope.client.first_token_unix_nano" - c.a."{FIRST_EVENT}") / 1e6 ELSE 0 END END'
)
"""`ttft_content_gap_ms`: the client's first event → its first token, for a client whose first token is its first
non-empty chunk (NULL where its export lacks the first event); 0 for one that counts the first token event. So
client TTFT = TTFT network + the server's TTFT + this gap, exactly."""
CHECKED = ("instants", "violations", "unread_events")
"""`requests` columns computed over the finished row (derive/instants.py, invariants.py, unread_events.py)."""

EVENTS_READ = {
    "native": native.EVENTS_READ,
    "vllm": vllm.EVENTS_READ,
    "tgi": tgi.EVENTS_READ,
    "sglang": sglang.EVENTS_READ,
    "triton": triton.EVENTS_READ,
    "client": client.EVENTS_READ,
}
"""`spans.source` → the span event names its adapter reads (derive/unread_events.py)."""


def requests_sql(spans: str, present: set[str] | None = None) -> str:
    """SELECT producing `requests` rows (columns in table order) from the relation `spans`.

    `present`: the `source` values found in `spans`, when the caller knows them: adapters with nothing to read
    are left out of the query. Each adapter costs its own pipelines whether or not it finds rows, and for a
    small batch that fixed cost was most of the derivation (65-100 ms of it, against ~40 ms for the native
    adapter alone)."""

    def union(adapters) -> str:
        return " UNION ALL BY NAME ".join(f"({a(spans)})" for a in adapters)

    wanted = [a for src, a in SPAN_ADAPTERS if present is None or src in present]
    # with no adapter left, one stands in for the columns and yields nothing (the optimizer drops its scan)
    served = union(wanted) if wanted else f"SELECT * FROM ({union([SPAN_ADAPTERS[0][1]])}) WHERE false"
    reported = (
        union(REPORTED_ADAPTERS)
        if present is None or "client" in present
        else f"SELECT * FROM ({union(REPORTED_ADAPTERS)}) WHERE false"
    )
    # without a server clock, the unknown remainder of the client figure is unaccounted (its TTFT less the wait for
    # content, where the client says how long that was)
    client_e2e = "CASE WHEN s.server_span_id IS NULL THEN (c.end_ns - c.start_ns) / 1e6 END"
    client_ttft = (
        "CASE WHEN s.server_span_id IS NULL THEN "
        f'(c.a."budgetscope.client.first_token_unix_nano" - c.start_ns) / 1e6 - coalesce({CONTENT_GAP}, 0) END'
    )
    derived = {
        "unaccounted_ms": f"coalesce(s.e2e_ms, {client_e2e}) - (coalesce(s.frontend_ms, 0) + coalesce(s.queue_ms, 0)"
        " + coalesce(s.prefill_ms, 0) + coalesce(s.decode_ms, 0) + coalesce(s.postprocess_ms, 0))",
        "ttft_unaccounted_ms": f"coalesce(s.ttft_ms, {client_ttft}) - (coalesce(s.ttft_frontend_ms, 0)"
        " + coalesce(s.ttft_queue_ms, 0) + coalesce(s.ttft_prefill_ms, 0))",
        "tpot_ms": "CASE WHEN s.output_tokens > 1 THEN s.decode_ms / (s.output_tokens - 1) ELSE 'NaN'::DOUBLE END",
        "has_client_span": "c.span_id IS NOT NULL",
        "client_span_id": "c.span_id",
        "client_scheduled_ns": 'c.a."budgetscope.client.scheduled_unix_nano"',
        "client_sent_ns": "c.start_ns",
        "client_first_token_ns": 'c.a."budgetscope.client.first_token_unix_nano"',
        "client_end_ns": CLIENT_END,
        "client_ttft_ms": '(c.a."budgetscope.client.first_token_unix_nano" - c.start_ns) / 1e6',
        "client_e2e_ms": f"({CLIENT_END} - c.start_ns) / 1e6",
        "client_tpot_ms": f'CASE WHEN s.output_tokens > 1 THEN (({CLIENT_END} - c.a."budgetscope.client.first_token_unix_nano")'
        " / 1e6) / (s.output_tokens - 1) ELSE 'NaN'::DOUBLE END",
        "client_itl_ms": 'c.a."budgetscope.client.itl_ms"',
        "schedule_lag_ms": '(c.start_ns - c.a."budgetscope.client.scheduled_unix_nano") / 1e6',
        "http_status": 'coalesce(c.a."http.response.status_code", c.a."http.status_code")',
        "network_ms": f"({CLIENT_END} - c.start_ns) / 1e6 - s.e2e_ms",
        **{col: f"res.resource->>'{key}'" for col, key in REPLICA_COLUMNS.items()},
        # kept on the row so that the report counts the definitions without joining `spans` (analysis/report.py)
        "client_first_token_definition": f"CASE WHEN c.span_id IS NOT NULL "
        f"THEN coalesce(c.a.\"{FIRST_TOKEN_DEFINITION}\", '{TOKEN_EVENT}') END",
        "ttft_network_ms": f"CASE WHEN s.server_span_id IS NULL OR {invariants.client_view_ok(CLIENT_TTFT_RAW, 's.ttft_ms')} "
        f"THEN {CLIENT_TTFT_RAW} - s.ttft_ms END",
        "ttft_content_gap_ms": CONTENT_GAP,
    }
    # client spans no server row claims (as parent, or by the request id an import recorded), picked before their
    # attributes are parsed
    unclaimed = f"""(SELECT * FROM {spans} u WHERE {CLIENT_ROOT_SQL}
  AND NOT EXISTS (SELECT 1 FROM served v WHERE v.trace_id = u.trace_id AND (v.parent_span_id = u.span_id
    OR v.request_id = CAST(u.attributes->>'{ID_ATTR}' AS VARCHAR)))  -- a cast: DuckDB 1.5 would read request_id as JSON
  AND NOT EXISTS (SELECT 1 FROM reported p WHERE p.trace_id = u.trace_id AND p.parent_span_id = u.span_id))"""
    # Two scans for the client spans, not one with OR: each keeps its filter in the scan, which then reads the
    # attributes of the rows it keeps only (one scan with OR cost 0.5 s more over 350,000 spans).
    # The root spans' resources: narrowed to the roots' span ids first, so that the join probes with those rows
    # alone (350,000 spans: 1.84 → 1.34 s for the whole derivation, against 1.22 s without the join)
    cols = ",\n  ".join(
        f"{derived[c.name]} AS {c.name}" if c.name in derived else f"s.{c.name}"
        for c in REQUESTS.columns
        if c.name not in CHECKED
    )
    checked = {
        "instants": instants.seen_sql(),
        "violations": invariants.violations_sql("bs_client_e2e_raw_ms", "bs_client_ttft_raw_ms"),
        "unread_events": "coalesce(u.names, CAST([] AS VARCHAR[]))",
    }
    out = ", ".join(f"{checked[c.name]} AS {c.name}" if c.name in checked else f"r.{c.name}" for c in REQUESTS.columns)
    return f"""
WITH served AS ({served}),
reported AS (SELECT * FROM ({reported}) r
  WHERE NOT EXISTS (SELECT 1 FROM served v WHERE v.trace_id = r.trace_id AND v.parent_span_id = r.parent_span_id)),
s0 AS (
  SELECT * FROM served UNION ALL BY NAME SELECT * FROM reported
  UNION ALL BY NAME SELECT * FROM ({client.server_rows(unclaimed)}) o),
s AS ({instants.filled("s0")}),
c AS (SELECT trace_id, span_id, start_ns, end_ns, json_transform(attributes, '{CLIENT_ATTRS}') AS a FROM (
        SELECT * FROM {spans} WHERE {CLIENT_ROOT_SQL}
        UNION ALL SELECT * FROM {spans} WHERE {HTTP_CLIENT_SQL} AND NOT coalesce({CLIENT_ROOT_SQL}, false))),
r AS (
  SELECT {cols},
  {CLIENT_E2E_RAW} AS bs_client_e2e_raw_ms, {CLIENT_TTFT_RAW} AS bs_client_ttft_raw_ms
  FROM s LEFT JOIN c ON c.trace_id = s.trace_id
    AND (c.span_id = s.parent_span_id OR (s.server_span_id IS NOT NULL AND c.a."{ID_ATTR}" = s.request_id))
  LEFT JOIN (SELECT trace_id, span_id, resource FROM {spans} WHERE span_id IN (SELECT server_span_id FROM s)) res
    ON res.trace_id = s.trace_id AND res.span_id = s.server_span_id),
u AS ({unread_events.unread_sql(spans, EVENTS_READ)})
SELECT {out}
FROM r LEFT JOIN u ON u.trace_id = r.trace_id
"""
