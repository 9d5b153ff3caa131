"""Triton Inference Server adapter: OpenTelemetry mode and trace files (imported) → server rows.

Read at triton-inference-server/server e1db8a603d863b1317ee859bdeea2be19959462e (src/tracer.cc, src/tracer.h,
src/http_server.cc, src/grpc/infer_handler.cc and .h, src/grpc/stream_infer_handler.cc, docs/user_guide/trace.md),
core 73aad7c3348d040c7087d57837d75822c488495e (src/infer_request.cc, src/infer_trace.cc), python_backend
f9088ff60944cc5a2e97ff16baba55f1666852bc (src/python_be.cc), vllm_backend 8de0c148bda1da25de1e05ffaaf67116dacc7264
(src/model.py) and NVIDIA/TensorRT-LLM c8c6df08bd0ead54cd47f7973e1e425c28a174cd
(triton_backend/inflight_batcher_llm/src/model_instance_state.cc); tests/conformance/triton/README.md.

OpenTelemetry mode (`--trace-config mode=opentelemetry`, tracer `triton-server`, every span SERVER kind): per request
an `InferRequest` span (trace created → trace released: after the frontend sent the last byte), under it a span
named after the model (REQUEST_START → REQUEST_END, `triton.model_name`, `triton.request_id`; an ensemble's models
under the ensemble's), under each a `compute` span (COMPUTE_START → COMPUTE_END). Triton's timestamps are span
*events*, kept by ingest (`budgetscope.events`): the frontend's on `InferRequest` (HTTP_RECV_START/END, one
INFER_RESPONSE_COMPLETE per response, HTTP_SEND_START/END; gRPC: GRPC_WAITREAD_START/END, GRPC_SEND_START/END), the
core's on the model and compute spans (REQUEST_START, QUEUE_START, REQUEST_END; COMPUTE_*). A trace file
(`--trace-config triton,file=…`, `budgetscope import --from triton`) holds the same timestamps: one `InferRequest`
span a traced request, its timestamps as `triton.timestamp.<NAME>` attributes (the last of each name),
`triton.responses` counting INFER_RESPONSE_COMPLETE, a model run inside an ensemble a child span.

The request's instants (derive/instants.py), both modes:
  arrival     = HTTP_RECV_START; over gRPC GRPC_WAITREAD_END; else the `InferRequest` start (REQUEST_START in a file);
  queue start = the top model's QUEUE_START;
  first token = the first INFER_RESPONSE_COMPLETE, when the request got more than one response (a decoupled, streaming
                model: vLLM's backend sends one response per output, TensorRT-LLM's per executor response);
  last token  = the last INFER_RESPONSE_COMPLETE; a request with one response (a non-decoupled model) got every
                token in it. Over a gRPC stream Triton stamps only the first response (stream_infer_handler.cc), and
                writes each response (GRPC_SEND_END): with more than one write, that stamp is the first token and
                the last token is unknown;
  end         = HTTP_SEND_END / the last GRPC_SEND_END; else (a chunked reply, whose sends evhtp leaves at 0) the
                `InferRequest` span's end. In a file, else REQUEST_END, but only when it comes after the last
                response: the python backend releases a decoupled request when `execute()` returns, before its
                first token, so its REQUEST_END is not the end, and a chunked reply in a file has no end (E2E NULL);
  scheduled   = not seen: COMPUTE_START hands the request to the backend, and a backend with an engine of its own
                (vLLM, TensorRT-LLM) queues and batches it there, out of Triton's sight.
Stages: frontend, decode and postprocess from those instants; queue = Triton's queue, COMPUTE_START − QUEUE_START of
each model run that started before the first token (an ensemble: its models', the top one computing nothing);
prefill NULL, so COMPUTE_START → first token (the backend's own queue and prefill) is `ttft_unaccounted_ms`.
The model span's REQUEST_END and the compute span's end are never read as the end of generation. Zero-time stamps
(chunked HTTP sends; in OpenTelemetry mode they come out at the wall-clock time of the node's boot, Triton adding its
steady-clock offset to 0) are dropped: a stamp before the `InferRequest` span's start is none, but for the receive
stamps, which Triton takes before it creates the trace. Triton sees no tokens: output tokens, TPOT and ITL are NULL.
"""

from __future__ import annotations

from budgetscope.derive.classify import TRITON_FILE_SCOPE
from budgetscope.derive.server_row import select_list
from budgetscope.derive.span_tree import descendants
from budgetscope.schema import EVENTS_KEY

TRITON_ROOT = "InferRequest"
"""The root span of a Triton request, in OpenTelemetry mode and as `budgetscope import --from triton` writes it."""
TRITON_TS_PREFIX = "triton.timestamp."
TRITON_RESPONSE = "INFER_RESPONSE_COMPLETE"
RECEIVE = ("HTTP_RECV_START", "HTTP_RECV_END", "GRPC_WAITREAD_START", "GRPC_WAITREAD_END")
"""Stamps Triton takes before it creates the trace: they precede the `InferRequest` span's start."""

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
    # known and not needed: the other ends of the receive and send, and the compute's input/output copies
    "HTTP_RECV_END",
    "HTTP_SEND_START",
    "GRPC_WAITREAD_START",
    "GRPC_SEND_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
)
"""Triton's timestamps, its span events in OpenTelemetry mode (derive/unread_events.py). A backend's custom
activities (`<NAME>_START` / `<NAME>_END`) are not read."""
FILE_ATTRS = (
    "{"
    + ",".join(f'"{TRITON_TS_PREFIX}{t}":"BIGINT"' for t in _TS)
    + (
        ',"triton.model_name":"VARCHAR","triton.request_id":"VARCHAR","triton.responses":"BIGINT",'
        '"triton.first_response_ns":"BIGINT","triton.grpc_sends":"BIGINT"}'
    )
)
"""The attributes of an imported trace-file span."""
OTEL_ATTRS = (
    '{"triton.model_name":"VARCHAR","triton.request_id":"VARCHAR",'
    '"' + EVENTS_KEY + '":[{"name":"VARCHAR","time_unix_nano":"BIGINT"}]}'
)
"""The attributes of an OpenTelemetry-mode span, its events included."""
FILE_MARK = f"(scope_name = '{TRITON_FILE_SCOPE}' AND json_exists(attributes, '$.\"triton.responses\"'))"
"""SQL over a span: it was imported from a trace file (budgetscope/sources/importers.py `triton`, which has always
written its spans under the scope `triton-trace-file`, and `triton.responses` since 2026-11-26). The scope is tested
first: it spares the parse of every OpenTelemetry-mode span's attributes, which are mostly its events (the Triton
derivation of 1M spans 11 % less CPU; docs/benchmarks.md, seventeenth session)."""
EVENT_SPANS = f"source = 'triton' AND NOT {FILE_MARK}"
"""SQL over a span: an OpenTelemetry-mode span, whose events `events_sql` parses."""


def events_sql(spans: str) -> str:
    """SELECT: each OpenTelemetry-mode Triton span of `spans` with its attributes parsed, its events among them
    (`a`; the columns the adapter reads, and `source`). The adapter reads them, and so does the unread-events check
    (derive/requests.py): parsed once, as vLLM's (a span's events are most of its attributes)."""
    return f"""SELECT trace_id, span_id, parent_span_id, name, start_ns, end_ns, status_code, service_name, source,
  json_transform(attributes, '{OTEL_ATTRS}') AS a
FROM {spans} WHERE {EVENT_SPANS}"""


def _instants(first_token: str, last_token: str, end: str) -> dict[str, str]:
    """Server-row expressions shared by both modes, over the per-request relation `q` (arrival, queue_start,
    queue_ms: Triton's queue before the first token, request_id, model, failed)."""
    return dict(
        trace_id="q.trace_id",
        server_span_id="q.span_id",
        parent_span_id="q.parent_span_id",
        source="'triton'",
        request_id="coalesce(q.rid, q.span_id)",
        service_name="q.service_name",
        model="q.model",
        tier="'default'",
        outcome="CASE WHEN q.failed THEN 'error' ELSE 'ok' END",
        arrival_ns="q.arrival",
        queue_start_ns="q.queue_start",
        first_token_ns=first_token,
        last_token_ns=last_token,
        end_ns=end,
        queue_ms="q.queue_ms",
        ttft_queue_ms=f"CASE WHEN {first_token} IS NOT NULL THEN q.queue_ms END",
        ttft_ms=f"({first_token} - q.arrival) / 1e6",
    )


def _tokens(responses: str, first: str, last: str, sends: str) -> tuple[str, str]:
    """(first token, last token) SQL from the responses stamped, their first and last stamp, and the gRPC writes."""
    streamed = f"({responses} > 1 OR coalesce({sends}, 0) > 1)"
    first_token = f"CASE WHEN {streamed} THEN {first} END"
    last_token = f"CASE WHEN {responses} > 1 OR ({responses} = 1 AND coalesce({sends}, 0) <= 1) THEN {last} END"
    return first_token, last_token


_CARRIED = ("parent_span_id", "name", "start_ns", "status_code", "a")
"""What the walk carries of each span (span_tree.descendants), its parsed events among them: no join back to the
spans (the Triton derivation of 1M spans 13 % less CPU; docs/benchmarks.md, seventeenth session)."""


def _otel(spans: str, events: str | None = None) -> str:
    """SELECT: one server row per OpenTelemetry-mode `InferRequest` span of `spans`. `events`: a relation holding
    `events_sql(spans)`'s rows (default: that SELECT, inline)."""
    first_token, last_token = _tokens("q.responses", "q.first_response", "q.last_response", "q.grpc_sends")
    first0, last0 = _tokens("q0.responses", "q0.first_response", "q0.last_response", "q0.grpc_sends")
    end = "coalesce(q.http_send_end, q.grpc_send_end, q.end_ns)"
    rows = select_list(**_instants(first_token, last_token, end), e2e_ms=f"({end} - q.arrival) / 1e6")
    tree = f"(SELECT * FROM {events})" if events else f"({events_sql(spans)})"
    return f"""
WITH RECURSIVE t AS {tree},
r AS (SELECT * FROM t WHERE name = '{TRITON_ROOT}' AND NOT EXISTS (
        SELECT 1 FROM t p WHERE p.trace_id = t.trace_id AND p.span_id = t.parent_span_id)),
d(request_id, trace_id, span_id, {", ".join(_CARRIED)}, root_start) AS (
  {descendants("r", "t", _CARRIED, (("start_ns", "root_start"),))}),
x AS (SELECT * FROM d),
e0 AS (SELECT request_id, trace_id, span_id, root_start, e.name AS n, e.time_unix_nano AS ts FROM (
        SELECT request_id, trace_id, span_id, root_start, unnest(a."{EVENTS_KEY}") AS e FROM x) y),
-- every stamp of the request's spans; one before the trace was created is a zero one (0 + Triton's steady-clock
-- offset: the node's boot), but for the receive, stamped before the trace existed
-- (the request's start carried down the walk: no join of every stamp back to its request)
ev AS (SELECT request_id, trace_id, span_id, n, ts FROM e0
       WHERE ts > 0 AND (ts >= root_start OR n IN {RECEIVE!r})),
fe AS (SELECT trace_id, request_id,
         min(ts) FILTER (WHERE n = 'HTTP_RECV_START') AS recv_start,
         max(ts) FILTER (WHERE n = 'GRPC_WAITREAD_END') AS read_end,
         count(*) FILTER (WHERE n = '{TRITON_RESPONSE}') AS responses,
         min(ts) FILTER (WHERE n = '{TRITON_RESPONSE}') AS first_response,
         max(ts) FILTER (WHERE n = '{TRITON_RESPONSE}') AS last_response,
         max(ts) FILTER (WHERE n = 'HTTP_SEND_END') AS http_send_end,
         count(*) FILTER (WHERE n = 'GRPC_SEND_END') AS grpc_sends,
         max(ts) FILTER (WHERE n = 'GRPC_SEND_END') AS grpc_send_end
       FROM ev WHERE span_id = request_id GROUP BY trace_id, request_id),
-- the model runs: each model span, its QUEUE_START and its compute's start
qs AS (SELECT trace_id, span_id, min(ts) AS queue_start FROM ev WHERE n = 'QUEUE_START' GROUP BY trace_id, span_id),
cs AS (SELECT trace_id, parent_span_id, min(start_ns) AS compute_start FROM x WHERE name = 'compute'
       GROUP BY trace_id, parent_span_id),
runs AS (SELECT m.trace_id, m.request_id, m.span_id, m.parent_span_id, m.a."triton.model_name" AS model,
           m.a."triton.request_id" AS rid, m.status_code, qs.queue_start, cs.compute_start
         FROM x m LEFT JOIN qs ON qs.trace_id = m.trace_id AND qs.span_id = m.span_id
         LEFT JOIN cs ON cs.trace_id = m.trace_id AND cs.parent_span_id = m.span_id
         WHERE m.a."triton.model_name" IS NOT NULL),
q0 AS (SELECT r.trace_id, r.span_id, r.parent_span_id, r.service_name, r.end_ns,
         coalesce(fe.recv_start, fe.read_end, r.start_ns) AS arrival,
         coalesce(fe.responses, 0) AS responses, fe.first_response, fe.last_response, fe.http_send_end,
         fe.grpc_sends, fe.grpc_send_end, top.model, top.rid, top.queue_start,
         r.status_code = 'ERROR' OR coalesce(top.status_code = 'ERROR', false) AS failed
       FROM r LEFT JOIN fe ON fe.trace_id = r.trace_id AND fe.request_id = r.span_id
       LEFT JOIN runs top ON top.trace_id = r.trace_id AND top.parent_span_id = r.span_id),
-- Triton's queue: the waits of the model runs that started computing before the first token (after it, a run
-- such as an ensemble's postprocessing of each response lies inside decode); unknown if one's QUEUE_START is
w AS (SELECT q0.trace_id, q0.span_id,
        CASE WHEN count(*) = count(w.queue_start) THEN sum(w.compute_start - w.queue_start) / 1e6 END AS queue_ms
      FROM q0 JOIN runs w ON w.trace_id = q0.trace_id AND w.request_id = q0.span_id
      WHERE w.compute_start <= coalesce({first0}, {last0}, q0.end_ns)
      GROUP BY q0.trace_id, q0.span_id),
q AS (SELECT q0.*, w.queue_ms FROM q0 LEFT JOIN w ON w.trace_id = q0.trace_id AND w.span_id = q0.span_id)
SELECT {rows} FROM q"""


def _file(spans: str) -> str:
    """SELECT: one server row per imported trace-file `InferRequest` span of `spans` that has no Triton parent."""

    def ts(name: str, alias: str = "q.a") -> str:
        return f'{alias}."{TRITON_TS_PREFIX}{name}"'

    first_token, last_token = _tokens(
        'q.a."triton.responses"', 'q.a."triton.first_response_ns"', ts(TRITON_RESPONSE), 'q.a."triton.grpc_sends"'
    )
    # REQUEST_END ends the request only after its last response (python backend: before its first)
    released = f"CASE WHEN {ts('REQUEST_END')} >= coalesce({ts(TRITON_RESPONSE)}, 0) THEN {ts('REQUEST_END')} END"
    end = f"coalesce({ts('HTTP_SEND_END')}, {ts('GRPC_SEND_END')}, {released})"
    anchor = f"coalesce({end}, greatest({ts('REQUEST_END')}, {ts(TRITON_RESPONSE)}), q.end_ns)"
    rows = select_list(**_instants(first_token, last_token, anchor), e2e_ms=f"({end} - q.arrival) / 1e6")
    arrival = f"coalesce({ts('HTTP_RECV_START', 'r.a')}, {ts('GRPC_WAITREAD_END', 'r.a')}, {ts('REQUEST_START', 'r.a')}, r.start_ns)"
    own_wait = f"{ts('COMPUTE_START', 'r.a')} - {ts('QUEUE_START', 'r.a')}"
    before_first = _tokens(
        'r.a."triton.responses"',
        'r.a."triton.first_response_ns"',
        ts(TRITON_RESPONSE, "r.a"),
        'r.a."triton.grpc_sends"',
    )
    cutoff = f"coalesce({before_first[0]}, {before_first[1]}, r.end_ns)"
    return f"""
WITH t AS (SELECT *, json_transform(attributes, '{FILE_ATTRS}') AS a FROM {spans}
           WHERE source = 'triton' AND {FILE_MARK}),
r AS (SELECT * FROM t WHERE NOT EXISTS (SELECT 1 FROM t p WHERE p.trace_id = t.trace_id AND p.span_id = t.parent_span_id)),
-- an ensemble's models: trace-file child spans under the request's span; their waits before the first token
c AS (SELECT r.trace_id, r.span_id,
        CASE WHEN count(*) = count(c.a."{TRITON_TS_PREFIX}QUEUE_START") THEN
          sum(c.a."{TRITON_TS_PREFIX}COMPUTE_START" - c.a."{TRITON_TS_PREFIX}QUEUE_START") / 1e6 END AS queue_ms
      FROM r JOIN t c ON c.trace_id = r.trace_id AND c.parent_span_id = r.span_id
      WHERE c.a."{TRITON_TS_PREFIX}COMPUTE_START" <= {cutoff}
      GROUP BY r.trace_id, r.span_id),
q AS (SELECT r.trace_id, r.span_id, r.parent_span_id, r.service_name, r.end_ns, r.a,
        {arrival} AS arrival, {ts("QUEUE_START", "r.a")} AS queue_start,
        r.a."triton.model_name" AS model, r.a."triton.request_id" AS rid, r.status_code = 'ERROR' AS failed,
        coalesce(({own_wait}) / 1e6, c.queue_ms) AS queue_ms
      FROM r LEFT JOIN c ON c.trace_id = r.trace_id AND c.span_id = r.span_id)
SELECT {rows} FROM q"""


def server_rows(spans: str, events: str | None = None) -> str:
    """SELECT: one row per Triton request in `spans`: an OpenTelemetry-mode `InferRequest` span, or an imported
    trace-file span with no Triton parent (its parent may be a client span). `events`: a relation holding
    `events_sql(spans)`'s rows (default: that SELECT, inline)."""
    return f"({_otel(spans, events)}) UNION ALL ({_file(spans)})"
