"""Triton Inference Server adapter: trace files (imported) and OpenTelemetry mode → server rows.

Read at triton-inference-server/server e1db8a6 (src/tracer.cc, src/http_server.cc, src/grpc/*.cc,
docs/user_guide/trace.md); tests/conformance/triton/README.md.

Trace file (`--trace-config triton,file=…` with `level=TIMESTAMPS`): `budgetscope import --format triton` turns
each traced request into a span `InferRequest` (service `triton-inference-server`) whose attributes
`triton.timestamp.<NAME>` hold Triton's own timestamps (a model run inside an ensemble: a child span):
  arrival = HTTP_RECV_START (gRPC: GRPC_WAITREAD_END; else REQUEST_START), end = HTTP_SEND_END / GRPC_SEND_END
  (else REQUEST_END: chunked HTTP replies carry no send time);
  frontend = QUEUE_START − arrival (request read, parsed, handed to the scheduler),
  queue = COMPUTE_START − QUEUE_START (an ensemble, which computes nothing itself: its models' queue waits summed),
  done = the later of COMPUTE_END and the last INFER_RESPONSE_COMPLETE (a decoupled model answers after its
  `execute` returned), postprocess = end − done,
  TTFT = first INFER_RESPONSE_COMPLETE − arrival, for a model that sent more than one response (streamed).
OpenTelemetry mode (`--trace-config mode=opentelemetry`): every span SERVER kind; Triton's timestamps are span
*events*, which the archive does not keep; the spans still bound them: the top-level `InferRequest` span (trace
created → trace released), the model span (REQUEST_START → REQUEST_END) and the `compute` span (COMPUTE_START →
COMPUTE_END): frontend = model start − arrival, queue = compute start − model start (REQUEST_START → QUEUE_START
too, a few µs the events alone tell), done = model end, postprocess = end − done; TTFT is NULL.
Triton sees model executions, not tokens: prefill and decode are NULL and compute → done is `unaccounted`.
"""

from __future__ import annotations

from budgetscope.derive.classify import TRITON_SERVICE_PREFIX
from budgetscope.derive.server_row import select_list
from budgetscope.derive.span_tree import descendants

TRITON_ROOT = "InferRequest"
"""The root span of a Triton request, as `budgetscope import --from triton` writes it."""
TRITON_TS_PREFIX = "triton.timestamp."
TRITON_RESPONSE = "INFER_RESPONSE_COMPLETE"

_TS = (
    "HTTP_RECV_START",
    "GRPC_WAITREAD_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_END",
    TRITON_RESPONSE,
    "REQUEST_END",
    "HTTP_SEND_END",
    "GRPC_SEND_END",
)
EVENTS_READ = (
    *_TS,
    "HTTP_RECV_END",
    "HTTP_SEND_START",
    "GRPC_WAITREAD_START",
    "GRPC_SEND_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
)
"""Triton's timestamps, as span events in OpenTelemetry mode (derive/unread_events.py)."""
ATTRS = (
    "{"
    + ",".join(f'"{TRITON_TS_PREFIX}{t}":"BIGINT"' for t in _TS)
    + (
        ',"triton.model_name":"VARCHAR","triton.request_id":"VARCHAR","triton.responses":"BIGINT",'
        '"triton.first_response_ns":"BIGINT"}'
    )
)


def server_rows(spans: str) -> str:
    """SELECT: one row per Triton request in `spans` (imported trace-file spans or OpenTelemetry top-level spans).

    A request is a Triton span whose parent is no Triton span (its parent may be a client span)."""

    def ts(name: str) -> str:
        return f'a."{TRITON_TS_PREFIX}{name}"'

    arrival = f"coalesce({ts('HTTP_RECV_START')}, {ts('GRPC_WAITREAD_END')}, {ts('REQUEST_START')}, r.start_ns)"
    end = f"coalesce({ts('HTTP_SEND_END')}, {ts('GRPC_SEND_END')}, {ts('REQUEST_END')}, r.end_ns)"
    queue_start = f"coalesce({ts('QUEUE_START')}, m.start_ns)"
    compute_start = f"coalesce({ts('COMPUTE_START')}, k.start_ns)"
    done = (
        f"coalesce(greatest({ts('COMPUTE_END')}, {ts(TRITON_RESPONSE)}), "
        f"CASE WHEN r.name = '{TRITON_ROOT}' AND {ts('REQUEST_START')} IS NULL THEN m.end_ns END)"
    )
    frontend = f"({queue_start} - {arrival}) / 1e6"
    queue = f"coalesce(({compute_start} - {queue_start}) / 1e6, c.queue_ms)"
    ttft = f'CASE WHEN a."triton.responses" > 1 THEN (a."triton.first_response_ns" - {arrival}) / 1e6 END'
    rows = select_list(
        trace_id="r.trace_id",
        server_span_id="r.span_id",
        parent_span_id="r.parent_span_id",
        source="'triton'",
        request_id='coalesce(a."triton.request_id", m.rid, r.span_id)',
        service_name="r.service_name",
        model='coalesce(a."triton.model_name", m.model)',
        tier="'default'",
        outcome="CASE WHEN r.status_code = 'ERROR' THEN 'error' ELSE 'ok' END",
        arrival_ns=arrival,
        end_ns=end,
        frontend_ms=frontend,
        queue_ms=queue,
        ttft_frontend_ms=frontend,
        ttft_queue_ms=queue,
        postprocess_ms=f"({end} - {done}) / 1e6",
        ttft_ms=ttft,
        e2e_ms=f"({end} - {arrival}) / 1e6",
    )
    triton = f"(SELECT * FROM {spans} WHERE starts_with(lower(coalesce(service_name, '')), '{TRITON_SERVICE_PREFIX}'))"
    return f"""
WITH RECURSIVE t AS (SELECT *, json_transform(attributes, '{ATTRS}') AS a FROM {triton}),
r AS (SELECT * FROM t WHERE NOT EXISTS (
        SELECT 1 FROM t p WHERE p.trace_id = t.trace_id AND p.span_id = t.parent_span_id)),
d(request_id, trace_id, span_id) AS ({descendants("r", "t")}),
m AS (SELECT c.trace_id, c.parent_span_id, min(c.start_ns) AS start_ns, max(c.end_ns) AS end_ns,
             any_value(coalesce(c.a."triton.model_name", c.name)) AS model, any_value(c.a."triton.request_id") AS rid
      FROM t c WHERE c.name NOT IN ('compute', '{TRITON_ROOT}') GROUP BY 1, 2),
k AS (SELECT d.request_id, min(x.start_ns) AS start_ns, max(x.end_ns) AS end_ns
      FROM d JOIN t x ON x.trace_id = d.trace_id AND x.span_id = d.span_id WHERE x.name = 'compute' GROUP BY 1),
-- an ensemble's models: trace-file child spans under the request's span
c AS (SELECT trace_id, parent_span_id,
             sum(c.a."{TRITON_TS_PREFIX}COMPUTE_START" - c.a."{TRITON_TS_PREFIX}QUEUE_START") / 1e6 AS queue_ms
      FROM t c WHERE c.name = '{TRITON_ROOT}' AND c.parent_span_id IS NOT NULL GROUP BY 1, 2)
SELECT {rows}
FROM r LEFT JOIN m ON m.trace_id = r.trace_id AND m.parent_span_id = r.span_id
LEFT JOIN k ON k.request_id = r.span_id
LEFT JOIN c ON c.trace_id = r.trace_id AND c.parent_span_id = r.span_id
"""
