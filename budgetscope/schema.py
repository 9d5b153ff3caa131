"""The archive's tables: one definition that both creates them and documents them.

`docs/archive.md` is generated from `TABLES` (``python -m budgetscope.schema``) and a test keeps the
two, and the real DuckDB schema, in step. Times are int64 ns since the Unix epoch (`*_ns`), durations are
milliseconds (`*_ms`).
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str
    description: str


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    description: str
    columns: tuple[Column, ...]
    kind: str = "table"  # "table" or "view"

    def ddl(self) -> str:
        cols = ",\n  ".join(f"{c.name} {c.type}" for c in self.columns)
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n  {cols}\n)"


C = Column

EVENTS_KEY = "budgetscope.events"
"""The attribute under which a span's events are kept: a list of {"name", "time_unix_nano", "attributes"}, in
the order sent. The `spans` table has no column for them; the vLLM journey-tracing adapter reads them."""


SPANS = Table(
    "spans",
    "Every span as received, one row each; `(trace_id, span_id)` is unique.",
    (
        C("trace_id", "VARCHAR", "W3C trace id, 32 lowercase hex digits"),
        C("span_id", "VARCHAR", "span id, 16 lowercase hex digits"),
        C("parent_span_id", "VARCHAR", "parent span id (hex), NULL for a root span"),
        C(
            "name",
            "VARCHAR",
            "span name, e.g. `chat llama-3-8b` (a request: `{operation} {model}`), `stage.queue`, `llm_request`",
        ),
        C(
            "kind",
            "VARCHAR",
            "SERVER, CLIENT, INTERNAL, PRODUCER, CONSUMER or UNSPECIFIED (also for a kind outside the OTLP enum: "
            '`-1`, `1e400`, 2^40, `"foo"`)',
        ),
        C("start_ns", "BIGINT", "start time, ns since the Unix epoch"),
        C("end_ns", "BIGINT", "end time, ns since the Unix epoch"),
        C("service_name", "VARCHAR", "resource attribute `service.name`"),
        C("scope_name", "VARCHAR", "instrumentation scope name, e.g. `budgetscope`, `vllm.llm_engine`"),
        C("status_code", "VARCHAR", "UNSET, OK or ERROR (UNSET also for a code outside the OTLP enum)"),
        C(
            "attributes",
            "JSON",
            "span attributes as one JSON object; ints, doubles, bools, arrays and maps keep their types;"
            " the span's events, if any, under `budgetscope.events` (name, time_unix_nano, attributes)",
        ),
        C("resource", "JSON", "resource attributes as one JSON object"),
        C(
            "source",
            "VARCHAR",
            "adapter that claims the span: native, client, llmd, vllm, tgi, sglang, triton, or other",
        ),
        C("batch_id", "BIGINT", "the `ingest_batches` row that brought it"),
    ),
)

_STAGE_COLS = (
    C(
        "network_ms",
        "DOUBLE",
        "client span − server span (uplink + downlink), ms, of a request both ends saw complete (outcome ok, the "
        "client span without a failure); NULL without a client span, for any other request, and where the client "
        "span is shorter than the server's (flagged `client_end_before_server_end`, docs/metrics.md)",
    ),
    C("frontend_ms", "DOUBLE", "server receive → enqueued (parse, tokenize, validate), ms, summed over its spans"),
    C("queue_ms", "DOUBLE", "waiting to be scheduled, re-queues after preemption included, ms"),
    C("prefill_ms", "DOUBLE", "first scheduled → first output token (chunk waits included), ms"),
    C("decode_ms", "DOUBLE", "first output token → last output token, ms"),
    C("postprocess_ms", "DOUBLE", "last output token → response complete, ms"),
    C("unaccounted_ms", "DOUBLE", "server E2E not covered by any server stage, ms (never hidden)"),
)

_TTFT_COLS = (
    C(
        "ttft_network_ms",
        "DOUBLE",
        "client TTFT (to its first stream event) − server TTFT: the network part of the client TTFT, ms; NULL "
        "without a client span or its first event, for a request not both ends saw complete, and where negative",
    ),
    C("ttft_frontend_ms", "DOUBLE", "frontend time before the first token, ms"),
    C("ttft_queue_ms", "DOUBLE", "queue time before the first token, ms"),
    C("ttft_prefill_ms", "DOUBLE", "prefill time before the first token, ms"),
    C("ttft_unaccounted_ms", "DOUBLE", "server TTFT − the three above, ms"),
)

REQUESTS = Table(
    "requests",
    "One row per request, whatever its source; one column per stage. Derived from `spans` at ingest.",
    (
        C("trace_id", "VARCHAR", "trace of the server root span"),
        C(
            "request_id",
            "VARCHAR",
            "the server's request/response id (`gen_ai.response.id`, vLLM `gen_ai.request.id`), else the root span id",
        ),
        C(
            "source",
            "VARCHAR",
            "adapter that produced the row: native, llmd, vllm, tgi, sglang, triton, llamacpp, or client",
        ),
        C(
            "service_name",
            "VARCHAR",
            "server `service.name`; on a client-only row (source `client`) the client's: the tool",
        ),
        C("model", "VARCHAR", "model name"),
        C("tier", "VARCHAR", "`budgetscope.tier`, `default` when absent"),
        C("tenant", "VARCHAR", "`budgetscope.tenant`, NULL when absent"),
        C("outcome", "VARCHAR", "ok, rejected, cancelled, error or timeout"),
        C("server_span_id", "VARCHAR", "span id of the server root span"),
        C("arrival_ns", "BIGINT", "server receive, ns since the Unix epoch"),
        C("first_token_ns", "BIGINT", "first output token on the server, ns; NULL if none"),
        C("end_ns", "BIGINT", "server response complete, ns"),
        C("input_tokens", "BIGINT", "prompt tokens"),
        C("cached_tokens", "BIGINT", "prompt tokens served from the prefix cache; NULL when the source does not say"),
        C("output_tokens", "BIGINT", "generated tokens"),
        *_STAGE_COLS,
        *_TTFT_COLS,
        C("ttft_ms", "DOUBLE", "server TTFT: first output token − server receive, ms"),
        C("e2e_ms", "DOUBLE", "server E2E: response complete − server receive, ms"),
        C("tpot_ms", "DOUBLE", "decode_ms / (output_tokens − 1), ms; NaN for one token"),
        C("itl_ms", "DOUBLE[]", "server inter-token gaps, ms, when the source records them"),
        C("queue_entries", "INTEGER", "number of queue spans (> 1 means re-queued after preemption)"),
        C(
            "has_client_span",
            "BOOLEAN",
            "a client span (`{operation} {model}` or `llm.client.request` of kind CLIENT, "
            "or an OpenTelemetry HTTP client span) is the parent of the server root",
        ),
        C("client_span_id", "VARCHAR", "span id of the client span"),
        C("client_scheduled_ns", "BIGINT", "when the open-loop plan meant to send it, ns"),
        C("client_sent_ns", "BIGINT", "when the client sent it, ns (client clock)"),
        C("client_first_token_ns", "BIGINT", "when the client received the first token, ns (client clock)"),
        C("client_end_ns", "BIGINT", "when the client received the end of the response, ns (client clock)"),
        C("client_ttft_ms", "DOUBLE", "first token received − request sent, ms"),
        C("client_e2e_ms", "DOUBLE", "response received − request sent, ms"),
        C("client_tpot_ms", "DOUBLE", "(client E2E − client TTFT) / (output_tokens − 1), ms"),
        C("client_itl_ms", "DOUBLE[]", "client-observed inter-token gaps, ms"),
        C("schedule_lag_ms", "DOUBLE", "sent − scheduled, ms (coordinated omission made visible)"),
        C("http_status", "INTEGER", "HTTP status the client saw"),
        # added after the first release: segments written before them read these as NULL (reader.requests_scan)
        C(
            "service_instance_id",
            "VARCHAR",
            "resource `service.instance.id` of the server root span (the replica); "
            "NULL when the server does not set it or the row has no server span",
        ),
        C("host_name", "VARCHAR", "resource `host.name` of the server root span; NULL when absent"),
        C("k8s_pod_name", "VARCHAR", "resource `k8s.pod.name` of the server root span; NULL when absent"),
        C(
            "client_first_token_definition",
            "VARCHAR",
            "how the client counted its first token (client span `budgetscope.client.first_token_definition`, "
            "`first_token_event` when absent); NULL without a client span, and in rows written before it",
        ),
        C(
            "queue_start_ns",
            "BIGINT",
            "when the server enqueued it (the end of frontend), ns; NULL where the server does not tell",
        ),
        C(
            "scheduled_ns",
            "BIGINT",
            "when the engine first scheduled it into a batch (the end of queue), ns; NULL where the server does not tell",
        ),
        C("last_token_ns", "BIGINT", "last output token on the server (the end of decode), ns; NULL if unknown"),
        C(
            "ttft_content_gap_ms",
            "DOUBLE",
            "first stream event → first non-empty chunk, ms: the part of `client_ttft_ms` a client that waits for "
            "content (AIPerf, GuideLLM) adds; 0 for one that counts the first token event; NULL without a client "
            "first token, or where the export lacks the first event",
        ),
        C(
            "instants",
            "VARCHAR[]",
            "the request's instants its source saw, in order: arrival, queue_start, scheduled, first_token, "
            "last_token, end (server), client_send, client_first_token, client_end (docs/metrics.md); "
            "NULL in rows written before it",
        ),
        C(
            "violations",
            "VARCHAR[]",
            "the invariants the row breaks (e.g. `first_token_outside_request`, `parts_exceed_e2e`; docs/metrics.md "
            "lists them): a misread of its format; empty when none, NULL in rows written before it",
        ),
        C(
            "unread_events",
            "VARCHAR[]",
            "names of the span events in the request's trace, on spans an adapter claimed, that no adapter reads; "
            "empty when none, NULL in rows written before it",
        ),
        C(
            "gateway_ms",
            "DOUBLE",
            "the gateway's time before the request reached the next traced hop (llm-d: the EPP's parse, flow "
            "control and scheduling and Envoy's forward: `gateway.request` start → the routing sidecar's or "
            "vLLM's receive), ms; NULL where no gateway traced the request",
        ),
        C(
            "kv_handoff_ms",
            "DOUBLE",
            "P/D disaggregation: the prefill leg's first token → the decode leg's arrival (the prefill response's "
            "return, the routing sidecar, the decode request), ms; NULL without P/D or when a leg is unknown",
        ),
        C(
            "client_last_token_ns",
            "BIGINT",
            "when the client received the last chunk with content, ns (client clock; AIPerf's request latency and "
            "GuideLLM's last token end there, before the end of the response); NULL where the client did not record "
            "it, and in rows written before it",
        ),
        C(
            "client_trace_id",
            "VARCHAR",
            "trace of the client span: `trace_id`, but for an imported record (AIPerf, GuideLLM) joined by request id, "
            "whose span keeps the trace of its file; NULL without a client span, and in rows written before it",
        ),
        C(
            "client_request_id",
            "VARCHAR",
            "the server's request id as the client recorded it (AIPerf `x_request_id`, GuideLLM `response_id`): "
            "the key an imported record joins its server row by; NULL where the client recorded none",
        ),
    ),
)

REPLICA_COLUMNS = {
    "service_instance_id": "service.instance.id",
    "host_name": "host.name",
    "k8s_pod_name": "k8s.pod.name",
}
"""`requests` column → the resource attribute of the server root span it keeps (derive/requests.py)."""

INGEST_BATCHES = Table(
    "ingest_batches",
    "What came in, when and from where: one row per batch (a JSON line, a JSON document, a protobuf message).",
    (
        C("batch_id", "BIGINT", "sequence number, referenced by `spans.batch_id`"),
        C("content_hash", "VARCHAR", "first 128 bits of the SHA-256 of the batch bytes, hex; the same hash lands once"),
        C("origin", "VARCHAR", "file path or receiver (e.g. `otlp-http`)"),
        C(
            "position",
            "VARCHAR",
            "where in the origin: `line 17`, `message 3`, `document`; a batch a collector's receiver took: "
            "`request 12 from 127.0.0.1:50412` (its spans were sent live)",
        ),
        C("format", "VARCHAR", "otlp-json, otlp-proto, or prometheus-text (a `/metrics` scrape)"),
        C("received_ns", "BIGINT", "when it was ingested, ns since the Unix epoch"),
        C("span_count", "BIGINT", "spans in the batch"),
        C("spans_inserted", "BIGINT", "spans new to the archive"),
        C("duplicate_spans", "BIGINT", "spans already in the archive (same trace_id, span_id), not inserted again"),
    ),
)

RECEIVED_POSITION = "request {} from {}"
"""`ingest_batches.position` of a batch that a collector's receiver took (the request's number, the peer): spans
sent live. A file's batches say where in the file they were (`line 17`, `message 3`, `document`)."""

GPU_SAMPLES = Table(
    "gpu_samples",
    "GPU samples, one row per metric point (filled by the GPU sampler's OTLP metrics).",
    (
        C("ts_ns", "BIGINT", "sample time, ns since the Unix epoch"),
        C("host_name", "VARCHAR", "`host.name`"),
        C("gpu_uuid", "VARCHAR", "`gpu.uuid`"),
        C("gpu_index", "INTEGER", "`gpu.index`"),
        C("metric", "VARCHAR", "metric name, e.g. `hw.gpu.memory.usage`"),
        C("value", "DOUBLE", "the value, in the metric's unit"),
        C("unit", "VARCHAR", "UCUM unit of the metric, e.g. `By`, `1`"),
        C("batch_id", "BIGINT", "the `ingest_batches` row that brought it"),
    ),
)

SERVER_METRICS = Table(
    "server_metrics",
    "Samples scraped from servers' Prometheus `/metrics` (vLLM, SGLang, TGI, llama.cpp, Triton), one row per "
    "series and scrape, under the server's own metric names (`budgetscope scrape`, `budgetscope import --format "
    "prometheus`). Histograms keep their `_bucket` / `_sum` / `_count` series.",
    (
        C("ts_ns", "BIGINT", "scrape time (or the sample's own timestamp), ns since the Unix epoch"),
        C("service_name", "VARCHAR", "server the samples came from (`--service-name`, default the URL's host:port)"),
        C("instance", "VARCHAR", "where it was scraped: the URL, or the file path"),
        C(
            "metric",
            "VARCHAR",
            "metric name as exposed, e.g. `vllm:num_requests_waiting`, `llamacpp:requests_deferred`",
        ),
        C("labels", "JSON", 'the series\' labels as one JSON object (e.g. `{"model_name": "m", "le": "0.5"}`)'),
        C("value", "DOUBLE", "the sample value, in the metric's own unit (vLLM: seconds and ratios 0–1)"),
        C("batch_id", "BIGINT", "the `ingest_batches` row of the scrape"),
    ),
)

PENDING_TRACES = Table(
    "pending_traces",
    "Internal: traces whose spans changed and whose `requests` rows are not yet derived.",
    (C("trace_id", "VARCHAR", "trace to (re)derive"),),
)

META = Table(
    "budgetscope_meta",
    "Internal: archive format version.",
    (C("key", "VARCHAR", "setting"), C("value", "VARCHAR", "its value")),
)

ENGINE_STEPS = Table(
    "engine_steps",
    "One row per `engine.step` span of the reference engine (a view over `spans`).",
    (
        C("start_ns", "BIGINT", "step start, ns since the Unix epoch"),
        C("end_ns", "BIGINT", "step end, ns"),
        C("service_name", "VARCHAR", "engine `service.name`"),
        C("batch_size", "BIGINT", "sequences in the batch"),
        C("prefill_tokens", "BIGINT", "prompt tokens computed in the step"),
        C("decode_seqs", "BIGINT", "sequences decoding one token in the step"),
        C("kv_blocks_used", "BIGINT", "KV blocks in use after the step"),
        C("kv_blocks_total", "BIGINT", "KV blocks in the pool"),
        C("queue_depth", "BIGINT", "requests waiting after the step"),
        C("preempted", "BIGINT", "sequences preempted in the step"),
        C(
            "max_seqs",
            "BIGINT",
            "the engine's running-sequence limit (batch slots); NULL in recordings before it was kept",
        ),
        C("token_budget", "BIGINT", "the engine's token budget of one step; NULL in recordings before it was kept"),
    ),
    kind="view",
)

ENGINE_STEPS_VIEW = """
CREATE OR REPLACE VIEW engine_steps AS
SELECT start_ns, end_ns, service_name,
  CAST(attributes->>'budgetscope.step.batch_size' AS BIGINT) AS batch_size,
  CAST(attributes->>'budgetscope.step.prefill_tokens' AS BIGINT) AS prefill_tokens,
  CAST(attributes->>'budgetscope.step.decode_seqs' AS BIGINT) AS decode_seqs,
  CAST(attributes->>'budgetscope.step.kv_blocks_used' AS BIGINT) AS kv_blocks_used,
  CAST(attributes->>'budgetscope.step.kv_blocks_total' AS BIGINT) AS kv_blocks_total,
  CAST(attributes->>'budgetscope.step.queue_depth' AS BIGINT) AS queue_depth,
  CAST(attributes->>'budgetscope.step.preempted' AS BIGINT) AS preempted,
  CAST(attributes->>'budgetscope.step.max_seqs' AS BIGINT) AS max_seqs,
  CAST(attributes->>'budgetscope.step.token_budget' AS BIGINT) AS token_budget
FROM spans WHERE name = 'engine.step'
"""

PUBLIC = (SPANS, REQUESTS, INGEST_BATCHES, GPU_SAMPLES, ENGINE_STEPS, SERVER_METRICS)
"""The tables and views SQL users may rely on (documented in docs/archive.md)."""

INTERNAL = (PENDING_TRACES, META)


def missing_columns(table: Table, present: set[str]) -> list[Column]:
    """The columns of `table` that a stored copy with the columns `present` lacks (one written before they were
    added), in table order."""
    return [c for c in table.columns if c.name not in present]


def create_statements() -> list[str]:
    """DDL that creates every table and view of a fresh archive."""
    stmts = [t.ddl() for t in (*PUBLIC, *INTERNAL) if t.kind == "table"]
    stmts.append(ENGINE_STEPS_VIEW)
    return stmts


def markdown() -> str:
    """The `name | type | description` tables of docs/archive.md."""
    out = []
    for t in PUBLIC:
        out.append(f"### `{t.name}`{' (view)' if t.kind == 'view' else ''}\n\n{t.description}\n")
        out.append("| name | type | description |\n| --- | --- | --- |")
        out.extend(f"| `{c.name}` | {c.type} | {c.description} |" for c in t.columns)
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown())
