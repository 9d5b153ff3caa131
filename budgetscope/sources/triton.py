"""Triton Inference Server adapter: trace files (imported) and OpenTelemetry mode → server rows.

Trace file (`--trace-config triton,file=…` with `level=TIMESTAMPS`; docs/user_guide/trace.md): `budgetscope
import --format triton` turns each traced request into a span `InferRequest` (service
`triton-inference-server`) whose attributes `triton.timestamp.<NAME>` hold Triton's own timestamps:
  arrival = HTTP_RECV_START (gRPC: GRPC_WAITREAD_END; else REQUEST_START), end = HTTP_SEND_END / GRPC_SEND_END
  (else REQUEST_END);
  frontend = QUEUE_START − arrival (request read, parsed, handed to the scheduler),
  queue = COMPUTE_START − QUEUE_START,
  postprocess = end − COMPUTE_END (response assembled and sent).
OpenTelemetry mode (`--trace-config mode=opentelemetry`): Triton's timestamps are span *events*, which the archive
does not keep; the spans still bound them: the top-level span (arrival → end), the model span (REQUEST_START →
REQUEST_END) and the `compute` span (COMPUTE_START → COMPUTE_END): frontend = model start − arrival, queue =
compute start − model start, postprocess = end − compute end.
Triton sees one model execution, not tokens: COMPUTE_START → COMPUTE_END is prefill and decode together and
cannot be split, so prefill, decode and TTFT are NULL and compute time is `unaccounted`.
"""

from __future__ import annotations

from budgetscope.sources.classify import TRITON_SERVICE_PREFIX
from budgetscope.sources.importers import TRITON_ROOT, TRITON_TS_PREFIX
from budgetscope.sources.server_row import select_list

_TS = ("HTTP_RECV_START", "GRPC_WAITREAD_END", "REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_END",
       "REQUEST_END", "HTTP_SEND_END", "GRPC_SEND_END")
ATTRS = "{" + ",".join(f'"{TRITON_TS_PREFIX}{t}":"BIGINT"' for t in _TS) + \
        ',"triton.model_name":"VARCHAR","triton.request_id":"VARCHAR","model_name":"VARCHAR","request_id":"VARCHAR"}'


def server_rows(spans: str) -> str:
    """SELECT: one row per Triton request in `spans` (imported trace-file spans or OpenTelemetry top-level spans)."""
    def ts(name: str) -> str:
        return f'a."{TRITON_TS_PREFIX}{name}"'

    arrival = f"coalesce({ts('HTTP_RECV_START')}, {ts('GRPC_WAITREAD_END')}, {ts('REQUEST_START')}, r.start_ns)"
    end = f"coalesce({ts('HTTP_SEND_END')}, {ts('GRPC_SEND_END')}, {ts('REQUEST_END')}, r.end_ns)"
    queue_start = f"coalesce({ts('QUEUE_START')}, m.start_ns)"
    compute_start = f"coalesce({ts('COMPUTE_START')}, k.start_ns)"
    compute_end = f"coalesce({ts('COMPUTE_END')}, k.end_ns)"
    rows = select_list(
        trace_id="r.trace_id", server_span_id="r.span_id", parent_span_id="r.parent_span_id", source="'triton'",
        request_id='coalesce(a."triton.request_id", a."request_id", r.span_id)', service_name="r.service_name",
        model='coalesce(a."triton.model_name", a."model_name", m.name)', tier="'default'",
        outcome="CASE WHEN r.status_code = 'ERROR' THEN 'error' ELSE 'ok' END",
        arrival_ns=arrival, end_ns=end,
        frontend_ms=f"({queue_start} - {arrival}) / 1e6", queue_ms=f"({compute_start} - {queue_start}) / 1e6",
        postprocess_ms=f"({end} - {compute_end}) / 1e6", e2e_ms=f"({end} - {arrival}) / 1e6",
    )
    triton = f"(SELECT * FROM {spans} WHERE starts_with(lower(coalesce(service_name, '')), '{TRITON_SERVICE_PREFIX}'))"
    return f"""
WITH t AS {triton},
r AS (SELECT *, json_transform(attributes, '{ATTRS}') AS a FROM t
      WHERE name = '{TRITON_ROOT}' OR NOT EXISTS (
        SELECT 1 FROM t p WHERE p.trace_id = t.trace_id AND p.span_id = t.parent_span_id)),
m AS (SELECT c.trace_id, c.parent_span_id, min(c.start_ns) AS start_ns, any_value(c.name) AS name
      FROM t c WHERE c.name <> 'compute' GROUP BY 1, 2),
k AS (SELECT trace_id, min(start_ns) AS start_ns, max(end_ns) AS end_ns FROM t WHERE name = 'compute' GROUP BY 1)
SELECT {rows}
FROM r LEFT JOIN m ON m.trace_id = r.trace_id AND m.parent_span_id = r.span_id
LEFT JOIN k ON k.trace_id = r.trace_id
"""
