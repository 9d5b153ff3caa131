"""Assemble `requests` rows: every adapter's server rows, joined to their client span, with derived metrics.

The client span `llm.client.request` is the parent of the server root (W3C traceparent), so the join is
(trace_id, client span_id = server parent_span_id). Network is derived only where a client span exists:
  network_ms      = client E2E − server E2E   (uplink + downlink over the whole request)
  ttft_network_ms = client TTFT − server TTFT (the network part of the client's TTFT)
"""

from __future__ import annotations

from budgetscope.archive.schema import REQUESTS
from budgetscope.sources import native, vllm
from budgetscope.sources.classify import CLIENT_ROOT

ADAPTERS = (native, vllm)

CLIENT_ATTRS = (
    '{"budgetscope.client.scheduled_unix_nano":"BIGINT","budgetscope.client.first_token_unix_nano":"BIGINT",'
    '"budgetscope.client.itl_ms":"DOUBLE[]","http.response.status_code":"INTEGER"}'
)


def requests_sql(spans: str) -> str:
    """SELECT producing `requests` rows (columns in table order) from the relation `spans`."""
    server = " UNION ALL BY NAME ".join(f"({a.server_rows(spans)})" for a in ADAPTERS)
    derived = {
        "unaccounted_ms": "s.e2e_ms - (coalesce(s.frontend_ms, 0) + coalesce(s.queue_ms, 0) + coalesce(s.prefill_ms, 0)"
                          " + coalesce(s.decode_ms, 0) + coalesce(s.postprocess_ms, 0))",
        "ttft_unaccounted_ms": "s.ttft_ms - (coalesce(s.ttft_frontend_ms, 0) + coalesce(s.ttft_queue_ms, 0)"
                               " + coalesce(s.ttft_prefill_ms, 0))",
        "tpot_ms": "CASE WHEN s.output_tokens > 1 THEN s.decode_ms / (s.output_tokens - 1) ELSE 'NaN'::DOUBLE END",
        "has_client_span": "c.span_id IS NOT NULL",
        "client_span_id": "c.span_id",
        "client_scheduled_ns": "c.a.\"budgetscope.client.scheduled_unix_nano\"",
        "client_sent_ns": "c.start_ns",
        "client_first_token_ns": "c.a.\"budgetscope.client.first_token_unix_nano\"",
        "client_end_ns": "c.end_ns",
        "client_ttft_ms": "(c.a.\"budgetscope.client.first_token_unix_nano\" - c.start_ns) / 1e6",
        "client_e2e_ms": "(c.end_ns - c.start_ns) / 1e6",
        "client_tpot_ms": "CASE WHEN s.output_tokens > 1 THEN ((c.end_ns - c.a.\"budgetscope.client.first_token_unix_nano\")"
                          " / 1e6) / (s.output_tokens - 1) ELSE 'NaN'::DOUBLE END",
        "client_itl_ms": "c.a.\"budgetscope.client.itl_ms\"",
        "schedule_lag_ms": "(c.start_ns - c.a.\"budgetscope.client.scheduled_unix_nano\") / 1e6",
        "http_status": "c.a.\"http.response.status_code\"",
        "network_ms": "(c.end_ns - c.start_ns) / 1e6 - s.e2e_ms",
        "ttft_network_ms": "(c.a.\"budgetscope.client.first_token_unix_nano\" - c.start_ns) / 1e6 - s.ttft_ms",
    }
    cols = ",\n  ".join(f"{derived[c.name]} AS {c.name}" if c.name in derived else f"s.{c.name}"
                        for c in REQUESTS.columns)
    return f"""
WITH s AS ({server}),
c AS (SELECT trace_id, span_id, start_ns, end_ns, json_transform(attributes, '{CLIENT_ATTRS}') AS a
      FROM {spans} WHERE name = '{CLIENT_ROOT}')
SELECT {cols}
FROM s LEFT JOIN c ON c.trace_id = s.trace_id AND c.span_id = s.parent_span_id
"""
