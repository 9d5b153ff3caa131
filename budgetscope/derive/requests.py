"""Assemble `requests` rows: every adapter's server rows, joined to their client span, with derived metrics.

The client span `llm.client.request` is the parent of the server root (W3C traceparent), so the join is
(trace_id, client span_id = server parent_span_id). An imported client record (AIPerf, GuideLLM) carries no trace
context but the server's request id (`budgetscope.client.request_id`): it joins, from whichever trace it is in, the
one server row with that `request_id` (`ID_LINKS`), when exactly one server row and one client record (by span id)
have it; then the row's `client_trace_id` is the record's trace. Which spans arrived first does not matter: a
writer derives both traces together whenever either changes (derive/id_links.py). Network is derived only
where a client span exists:
  network_ms      = client E2E − server E2E   (uplink + downlink over the whole request), for a request both
                    ends saw complete (`COMPLETED`: outcome ok, the client span without a failure); NULL otherwise,
                    and where it would be below zero (flagged, derive/invariants.py)
  ttft_network_ms = client TTFT − server TTFT (the network part of the client's TTFT); for a client whose TTFT
                    waits for the first non-empty chunk (AIPerf, GuideLLM), its first event of any kind − server
                    TTFT, NULL where the export lacks it (AIPerf's records)
  ttft_content_gap_ms = that client's first event → its first non-empty chunk (0 for a client that counts the
                    first token event), so that client TTFT = TTFT network + server TTFT + the gap, exactly
Every row is then checked once, whatever its adapter: the stages an adapter left NULL are taken from the instants
it saw (derive/instants.py), the invariants of derive/invariants.py name what the row breaks (a client span shorter
than the server's is no client end), and the span events no adapter reads are listed (derive/unread_events.py).

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

An OpenTelemetry GenAI client span (an SDK call: openai-v2's `chat {model}`, OpenLLMetry's `openai.chat`) is the
client span in place of the HTTP span below it, when it holds only that one (derive/genai.py): it timed what the
application waited for, a streamed response's end included; its first chunk event, where it has one, is the
client's first token.

An llm-d request (derive/llmd.py) is one row whose vLLM legs are read by the vLLM adapter and are no rows of
their own; its gateway and KV hand-off are stages (`gateway_ms`, `kv_handoff_ms`), in the unaccounted sums.

Replicas: the server root span's resource gives `service_instance_id`, `host_name` and `k8s_pod_name`
(schema.REPLICA_COLUMNS), for every adapter at once; rows without a server span have them NULL.
"""

from __future__ import annotations

from contextlib import contextmanager

from budgetscope.derive import (
    client,
    genai,
    instants,
    invariants,
    llamacpp,
    llmd,
    native,
    sglang,
    tgi,
    triton,
    unread_events,
    vllm,
)
from budgetscope.derive.classify import CLIENT_ROOT_SQL, GENAI_CLIENT_SQL, HTTP_CLIENT_SQL
from budgetscope.derive.client import (
    FIRST_EVENT,
    FIRST_TOKEN_DEFINITION,
    ID_ATTR,
    LAST_TOKEN,
    NONEMPTY_CHUNK,
    TOKEN_EVENT,
)
from budgetscope.derive.server_row import select_list
from budgetscope.schema import EVENTS_KEY, REPLICA_COLUMNS, REQUESTS

ADAPTERS = (native, vllm)
"""The original span adapters (kept for callers that list them)."""
SPAN_ADAPTERS = (
    ("native", native.server_rows),
    ("llmd", llmd.server_rows),
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
    '"budgetscope.client.first_event_unix_nano":"BIGINT","budgetscope.client.last_token_unix_nano":"BIGINT",'
    '"error.type":"VARCHAR"}'
)
"""The client span attributes the derivation reads; `http.status_code` is the HTTP conventions' old name."""

E2E_PARTS = " + ".join(
    f"coalesce(s.{c}, 0)"
    for c in ("gateway_ms", "frontend_ms", "queue_ms", "prefill_ms", "kv_handoff_ms", "decode_ms", "postprocess_ms")
)
"""SQL: the server stages of a row, an unknown one as 0 (its time is `unaccounted`)."""
TTFT_PARTS = " + ".join(
    f"coalesce(s.{c}, 0)"
    for c in ("gateway_ms", "ttft_frontend_ms", "ttft_queue_ms", "ttft_prefill_ms", "kv_handoff_ms")
)
"""SQL: the server stages of a row inside its TTFT window (the gateway and a KV hand-off lie wholly before the first
token)."""

CLIENT_E2E_RAW = "(c.end_ns - c.start_ns) / 1e6"
"""The client's E2E as its span timed it."""
COMPLETED = (
    "s.outcome = 'ok' AND c.a.\"error.type\" IS NULL"
    ' AND coalesce(c.a."http.response.status_code", c.a."http.status_code", 200) < 400'
)
"""Both ends saw the request complete: the server's outcome is ok and the client's span no failure (a client
that cancelled, timed out or got an error status stopped timing before the response's end). Network is
defined for these requests only (docs/metrics.md)."""
CLIENT_VIEW_OK = invariants.client_view_ok(CLIENT_E2E_RAW, "s.e2e_ms")
CLIENT_END = (
    f"CASE WHEN s.server_span_id IS NULL OR NOT c.is_http OR NOT coalesce({COMPLETED}, false) OR {CLIENT_VIEW_OK} "
    "THEN c.end_ns END"
)
"""When the client had the whole response: an HTTP client span shorter than the server span's E2E did not time
the response's end (that of a streamed response ended at its headers): no client end (derive/invariants.py).
A span that read the response to its end (`llm.client.request`: `load`, the imports) keeps its end; when it is
still shorter than the server's, the server span ended after its last byte was written (docs/metrics.md): the
row is flagged and has no network. A server's reported E2E (a header) is not its clock: there the row is only
flagged."""
CLIENT_FIRST_EVENT = (
    f"CASE WHEN c.a.\"{FIRST_TOKEN_DEFINITION}\" = '{NONEMPTY_CHUNK}' "
    f'THEN c.a."{FIRST_EVENT}" ELSE c.first_token_ns END'
)
"""The client's first stream event of any kind, ns: the time comparable with the server's first token. A tool that
waits for the first non-empty chunk (AIPerf, GuideLLM) adds the server's empty chunks to its TTFT; only its first
event, where the export has it, is network-comparable (NULL where it lacks it: AIPerf's records alone)."""
CLIENT_TTFT_RAW = f"({CLIENT_FIRST_EVENT} - c.start_ns) / 1e6"
"""The client's TTFT to its first stream event, as its span gave it."""
CONTENT_GAP = (
    "CASE WHEN c.first_token_ns IS NOT NULL THEN "
    f"CASE WHEN c.a.\"{FIRST_TOKEN_DEFINITION}\" = '{NONEMPTY_CHUNK}' "
    f'THEN (c.first_token_ns - c.a."{FIRST_EVENT}") / 1e6 ELSE 0 END END'
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
    "client": (*client.EVENTS_READ, *genai.EVENTS_READ),
    "llmd": llmd.EVENTS_READ,
}
"""`spans.source` → the span event names its adapter reads (derive/unread_events.py)."""


ID_LINKS = f"""
SELECT client_trace_id, client_span_id, trace_id, server_span_id FROM (
  SELECT k.*, row_number() OVER (PARTITION BY k.rid ORDER BY k.client_trace_id = k.trace_id DESC, k.client_trace_id)
    AS copy
  FROM (SELECT i.rid, i.trace_id AS client_trace_id, i.span_id AS client_span_id, v.trace_id, v.server_span_id
        FROM (SELECT trace_id, span_id, a."{ID_ATTR}" AS rid FROM cs WHERE NOT is_http AND a."{ID_ATTR}" IS NOT NULL) i
        JOIN served v ON v.request_id = i.rid AND v.server_span_id IS NOT NULL
        WHERE NOT EXISTS (SELECT 1 FROM cs p WHERE p.trace_id = v.trace_id AND p.span_id = v.parent_span_id)) k
  JOIN (SELECT v.request_id AS rid FROM served v WHERE v.server_span_id IS NOT NULL
          AND v.request_id IN (SELECT a."{ID_ATTR}" FROM cs WHERE NOT is_http)
        GROUP BY v.request_id HAVING count(*) = 1) one_server USING (rid)
  JOIN (SELECT a."{ID_ATTR}" AS rid FROM cs WHERE NOT is_http AND a."{ID_ATTR}" IS NOT NULL
        GROUP BY 1 HAVING count(DISTINCT span_id) = 1) one_record USING (rid)) j
WHERE copy = 1"""
"""Imported client records (`cs`, with the server's request id `ID_ATTR`) → the server row (`served`) each joins,
in whichever traces both are: only where the id names one server row in all (without a client span of its own)
and one record. An older import's copy of the record in the server's trace is the same record (by span id), and
the one joined."""


PLANNER = {"disabled_optimizers": "build_side_probe_side"}
"""DuckDB settings a derivation runs under (`planned`). DuckDB's `build_side_probe_side` pass swaps the two sides
of a hash join by its estimates of their rows; those of the CTEs here are far off, and it built hash tables over
the wide server rows where the written side was narrow (the server root spans' resources). Without it: the same
rows, 7-19 % less time for vLLM classic and journey, TGI, SGLang and Triton, native the same (docs/benchmarks.md,
2026-11-29, seventh session)."""


@contextmanager
def planned(con, settings: dict[str, str] = PLANNER):
    """Run what the block executes on the DuckDB connection `con` under `settings` (the derivation's, `PLANNER`),
    and reset them after. Around a whole transaction, not inside one: DuckDB refuses the RESET in a transaction
    that a failed statement aborted."""
    for key, value in settings.items():
        con.execute(f"SET {key} = '{value}'")
    try:
        yield con
    finally:
        for key in settings:
            con.execute(f"RESET {key}")


def present_sources(con, spans: str = "spans") -> set[str]:
    """The `source` values found in the relation `spans` of `con` (DuckDB, or a SparkConnection): the `present` of
    `served_sql` and `requests_sql`, so that only their adapters run."""
    return {src for (src,) in con.execute(f"SELECT DISTINCT source FROM {spans}").fetchall()}


def _union(spans: str, adapters) -> str:
    return " UNION ALL BY NAME ".join(f"({a(spans)})" for a in adapters)


PARSED_EVENTS = {
    "vllm": ("bs_vllm_ev", vllm.events_sql, vllm.EVENT_SPANS, "events"),
    "triton": ("bs_triton_ev", triton.events_sql, triton.EVENT_SPANS, f'a."{EVENTS_KEY}"'),
}
"""Sources whose adapter parses its spans' events and shares the parse with the unread-events check: (the CTE that
holds it, its SELECT over the spans, the SQL condition over a span that selects those it holds, the expression of
a row's events)."""


def served_sql(spans: str, present: set[str] | None = None, events: dict[str, str] | None = None) -> str:
    """SELECT: the server rows of the span adapters (`SPAN_ADAPTERS`) whose sources are `present`, before the
    client join: the first part of `requests_sql`, which an engine may compute on its own first (Spark does:
    spark/requests_frame.py). `events`: source → a relation holding its `PARSED_EVENTS` SELECT's rows (default:
    each adapter parses its own)."""
    wanted = [a for src, a in SPAN_ADAPTERS if present is None or src in present]
    legs = llmd.legs if present is None or "llmd" in present else None
    events = events or {}
    if legs or events:
        # an llm-d request's vLLM legs are its own, never rows of their own (derive/llmd.py)
        vllm_rows = lambda sp: vllm.server_rows(sp, legs(sp) if legs else None, events.get("vllm"))  # noqa: E731
        triton_rows = lambda sp: triton.server_rows(sp, events.get("triton"))  # noqa: E731
        given = {vllm.server_rows: vllm_rows, triton.server_rows: triton_rows}
        wanted = [given.get(a, a) for a in wanted]
    # with no adapter left, one stands in for the columns and yields nothing (the optimizer drops its scan)
    return _union(spans, wanted) if wanted else f"SELECT * FROM ({_union(spans, [SPAN_ADAPTERS[0][1]])}) WHERE false"


def requests_sql(spans: str, present: set[str] | None = None, served: str | None = None) -> str:
    """SELECT producing `requests` rows (columns in table order) from the relation `spans`.

    `present`: the `source` values found in `spans`, when the caller knows them: adapters with nothing to read
    are left out of the query. Each adapter costs its own pipelines whether or not it finds rows, and for a
    small batch that fixed cost was most of the derivation (65-100 ms of it, against ~40 ms for the native
    adapter alone). `served`: a relation that already holds `served_sql(spans, present)`'s rows (default: that
    SELECT, inline)."""

    # the events of vLLM's and Triton's spans, parsed once for their adapters and the unread-events check
    parsed = {src: p for src, p in PARSED_EVENTS.items() if present is None or src in present}
    served = (
        f"SELECT * FROM {served}" if served else served_sql(spans, present, {src: p[0] for src, p in parsed.items()})
    )
    unread = unread_events.unread_sql(spans, EVENTS_READ, [(name, cond, ev) for name, _, cond, ev in parsed.values()])
    # without a server clock, the unknown remainder of the client figure is unaccounted (its TTFT less the wait for
    # content, where the client says how long that was)
    client_e2e = "CASE WHEN s.server_span_id IS NULL THEN (c.end_ns - c.start_ns) / 1e6 END"
    client_ttft = (
        "CASE WHEN s.server_span_id IS NULL THEN "
        f"(c.first_token_ns - c.start_ns) / 1e6 - coalesce({CONTENT_GAP}, 0) END"
    )
    derived = {
        "unaccounted_ms": f"coalesce(s.e2e_ms, {client_e2e}) - ({E2E_PARTS})",
        "ttft_unaccounted_ms": f"coalesce(s.ttft_ms, {client_ttft}) - ({TTFT_PARTS})",
        "tpot_ms": "CASE WHEN s.output_tokens > 1 THEN s.decode_ms / (s.output_tokens - 1) ELSE 'NaN'::DOUBLE END",
        "has_client_span": "c.span_id IS NOT NULL",
        "client_span_id": "c.span_id",
        "client_scheduled_ns": 'c.a."budgetscope.client.scheduled_unix_nano"',
        "client_sent_ns": "c.start_ns",
        "client_first_token_ns": "c.first_token_ns",
        "client_last_token_ns": f'c.a."{LAST_TOKEN}"',
        "client_trace_id": "c.trace_id",
        "client_request_id": f'c.a."{ID_ATTR}"',
        "client_end_ns": CLIENT_END,
        "client_ttft_ms": "(c.first_token_ns - c.start_ns) / 1e6",
        "client_e2e_ms": f"({CLIENT_END} - c.start_ns) / 1e6",
        "client_tpot_ms": f"CASE WHEN s.output_tokens > 1 THEN (({CLIENT_END} - c.first_token_ns)"
        " / 1e6) / (s.output_tokens - 1) ELSE 'NaN'::DOUBLE END",
        "client_itl_ms": 'c.a."budgetscope.client.itl_ms"',
        "schedule_lag_ms": '(c.start_ns - c.a."budgetscope.client.scheduled_unix_nano") / 1e6',
        # a GenAI client span has no HTTP status: the HTTP span under it has
        "http_status": 'coalesce(c.a."http.response.status_code", c.a."http.status_code", g.http_status)',
        "network_ms": f"CASE WHEN {COMPLETED} AND (s.server_span_id IS NULL OR {CLIENT_VIEW_OK}) "
        f"THEN ({CLIENT_END} - c.start_ns) / 1e6 - s.e2e_ms END",
        **{col: f"(res.resource->>'{key}')" for col, key in REPLICA_COLUMNS.items()},
        # kept on the row so that the report counts the definitions without joining `spans` (analysis/report.py)
        "client_first_token_definition": f"CASE WHEN c.span_id IS NOT NULL "
        f"THEN coalesce(c.definition, '{TOKEN_EVENT}') END",
        "ttft_network_ms": f"CASE WHEN {COMPLETED} AND (s.server_span_id IS NULL OR "
        f"{invariants.client_view_ok(CLIENT_TTFT_RAW, 's.ttft_ms')}) THEN {CLIENT_TTFT_RAW} - s.ttft_ms END",
        "ttft_content_gap_ms": CONTENT_GAP,
    }
    # client spans no server row claims (as parent, or by the request id an import recorded), picked before their
    # attributes are parsed; a record linked by id is claimed in every trace that holds it (by span id: an
    # older import put a copy in the server's trace)
    unclaimed = """(SELECT * FROM bs_croots u WHERE
  NOT EXISTS (SELECT 1 FROM served v WHERE v.trace_id = u.trace_id AND v.parent_span_id = u.span_id)
  AND NOT EXISTS (SELECT 1 FROM links l WHERE l.client_span_id = u.span_id)
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
    if present is None or "client" in present:
        # the client roots found once, for the two reported adapters, the client spans and the unclaimed ones: each
        # had tested the attributes of every span of budgetscope's scope for the client root's key (6-14 % of a
        # native derivation's CPU, docs/benchmarks.md, eighth session)
        client_side = f"""bs_croots AS (SELECT * FROM {spans} WHERE {CLIENT_ROOT_SQL}),
reported AS (SELECT * FROM ({_union("bs_croots", REPORTED_ADAPTERS)}) r
  WHERE NOT EXISTS (SELECT 1 FROM served v WHERE v.trace_id = r.trace_id AND v.parent_span_id = r.parent_span_id)),
cs AS (SELECT trace_id, span_id, start_ns, end_ns, json_transform(attributes, '{CLIENT_ATTRS}') AS a, is_http FROM (
        SELECT *, false AS is_http FROM bs_croots
        UNION ALL SELECT *, true FROM {spans} WHERE {HTTP_CLIENT_SQL} AND NOT coalesce({CLIENT_ROOT_SQL}, false)
        UNION ALL SELECT *, false FROM {spans} WHERE {GENAI_CLIENT_SQL})),
links AS ({ID_LINKS}),
s0 AS (
  SELECT * FROM served UNION ALL BY NAME SELECT * FROM reported
  UNION ALL BY NAME SELECT * FROM ({client.server_rows(unclaimed)}) o),
s AS ({instants.filled("s0")}),
c AS (SELECT cs.*, coalesce(cs.a."budgetscope.client.first_token_unix_nano", f.first_chunk_ns) AS first_token_ns,
        coalesce(cs.a."{FIRST_TOKEN_DEFINITION}", CASE WHEN f.first_chunk_ns IS NOT NULL THEN '{genai.FIRST_CHUNK}' END)
          AS definition,
        coalesce(l.trace_id, cs.trace_id) AS join_trace_id, l.server_span_id AS join_server_span_id
      FROM cs LEFT JOIN ({genai.first_chunks(spans)}) f ON f.trace_id = cs.trace_id AND f.span_id = cs.span_id
      LEFT JOIN links l ON l.client_trace_id = cs.trace_id AND l.client_span_id = cs.span_id),
g AS ({genai.over_http(spans)}),"""
    else:
        # No client span of any kind (`source` 'client': budgetscope's, an import's, HTTP, GenAI): no reported
        # timings, no client rows, no links, nothing to join. The same columns, empty, in place of the client side
        # (the server columns an adapter leaves out, typed as the others give them): that side costs its
        # planning even when it finds nothing, about 45 ms a derivation of 120 (a writer derives once a second).
        client_side = f"""s0 AS (SELECT * FROM served UNION ALL BY NAME SELECT {select_list()} WHERE false),
s AS ({instants.filled("s0")}),
c AS (SELECT trace_id, span_id, start_ns, end_ns, json_transform(attributes, '{CLIENT_ATTRS}') AS a, false AS is_http,
        CAST(NULL AS BIGINT) AS first_token_ns, CAST(NULL AS VARCHAR) AS definition, trace_id AS join_trace_id,
        CAST(NULL AS VARCHAR) AS join_server_span_id
      FROM {spans} WHERE false),
g AS (SELECT CAST(NULL AS VARCHAR) AS trace_id, CAST(NULL AS VARCHAR) AS http_id, CAST(NULL AS VARCHAR) AS genai_id,
        CAST(NULL AS INTEGER) AS http_status WHERE false),"""
    first = "".join(f"{name} AS ({sql(spans)}),\n" for name, sql, _, _ in parsed.values())
    return f"""
WITH {first}served AS ({served}),
{client_side}
r AS (
  SELECT {cols},
  CASE WHEN {COMPLETED} THEN {CLIENT_E2E_RAW} END AS bs_client_e2e_raw_ms, {CLIENT_TTFT_RAW} AS bs_client_ttft_raw_ms
  FROM s LEFT JOIN g ON g.trace_id = s.trace_id AND g.http_id = s.parent_span_id
  LEFT JOIN c ON c.join_trace_id = s.trace_id
    AND (c.span_id = coalesce(g.genai_id, s.parent_span_id) OR c.join_server_span_id = s.server_span_id)
  LEFT JOIN (SELECT trace_id, span_id, resource FROM {spans} WHERE span_id IN (SELECT server_span_id FROM s)) res
    ON res.trace_id = s.trace_id AND res.span_id = s.server_span_id),
u AS ({unread})
SELECT {out}
FROM r LEFT JOIN u ON u.trace_id = r.trace_id
"""
