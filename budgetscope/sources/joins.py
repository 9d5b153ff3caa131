"""Imported client records → the trace of the server span of the same request, joined by request id.

A load tool's export (AIPerf, GuideLLM) has no trace context: the server's spans of the same request sit in a
trace of their own, so parentage cannot join them, and without a join the archive holds two rows a request (the
tool's client-only row and the server's). The tools record an id the server also records:
  aiperf    `metadata.x_request_id`: AIPerf sends it as the `X-Request-ID` header; budgetscope's engine (and
            vLLM, SGLang) take that header as the request id;
  guidellm  `response_id`: the `id` of the OpenAI response, which the server sets to its request id.
The importer keeps that id on the client span as `ID_ATTR`. Before the file lands, `budgetscope import` looks the
ids up among the archive's server rows that have no client span yet (`server_traces`) and moves each matched
client span into that row's trace (`rehome`); derivation (requests.py) then joins it to the server row by id, so
the request is counted once and network time is derived. An id held by several server rows is ambiguous and
left unjoined. A record whose server row is not in the archive yet stays a client-only row: import a tool's
results after the server's spans have landed.
"""

from __future__ import annotations

import json

from budgetscope.derive.client import ID_ATTR


def request_ids(doc: dict) -> dict[str, str]:
    """request id (`ID_ATTR`) → span id, over the client spans of an OTLP/JSON document (parsed)."""
    return {v: s["spanId"] for s in _spans(doc) if (v := _id(s)) is not None}


def server_traces(con, ids: dict[str, str]) -> dict[str, str]:
    """request id → trace id of the one server row with that id whose client span is none yet, or the span
    `ids[request id]` itself (the same file imported again lands in the same traces, so it lands once).
    `con`: a DuckDB connection over an archive's `requests`."""
    if not ids:
        return {}
    rows = con.execute(
        """SELECT r.request_id, any_value(r.trace_id) FROM requests r
        JOIN (SELECT unnest(?::VARCHAR[]) AS request_id, unnest(?::VARCHAR[]) AS span_id) w USING (request_id)
        WHERE r.server_span_id IS NOT NULL AND (NOT r.has_client_span OR r.client_span_id = w.span_id)
        GROUP BY r.request_id HAVING count(*) = 1""",
        [list(ids), list(ids.values())],
    ).fetchall()
    return dict(rows)


def rehome(doc: dict, traces: dict[str, str]) -> int:
    """Move each client span of `doc` (parsed OTLP/JSON, changed in place) whose id is in `traces` into that trace;
    returns how many moved."""
    moved = 0
    for s in _spans(doc):
        trace_id = traces.get(_id(s))
        if trace_id is not None:
            s["traceId"] = trace_id
            moved += 1
    return moved


def join(doc_bytes: bytes, lookup) -> tuple[bytes, int]:
    """`doc_bytes` (an importer's OTLP/JSON) with its client spans moved into their server rows' traces, and how
    many were; `lookup(ids)` answers as `server_traces`."""
    doc = json.loads(doc_bytes)
    ids = request_ids(doc)
    traces = lookup(ids) if ids else {}
    if not traces:
        return doc_bytes, 0
    moved = rehome(doc, traces)
    return json.dumps(doc, separators=(",", ":")).encode(), moved


def _spans(doc: dict):
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            yield from ss.get("spans", [])


def _id(span: dict) -> str | None:
    for kv in span.get("attributes", []):
        if kv.get("key") == ID_ATTR:
            return kv["value"].get("stringValue")
    return None
