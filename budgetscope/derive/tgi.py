"""Text Generation Inference adapter: its spans (OTLP, `--otlp-endpoint`) and its `x-*-time` response headers.

Spans, as TGI's router creates them (huggingface/text-generation-inference db931fc: router/src/server.rs,
router/src/infer/mod.rs, backends/v3/src/queue.rs and backend.rs; tests/conformance/tgi/README.md): the handler span
(`generate`, `generate_stream`, `completions`, `chat_completions`, all INTERNAL kind) whose fields `validation_time`,
`queue_time`, `inference_time`, `total_time` are Rust `Duration` Debug text (`12.3ms`, `1.2s`, `850µs`). Below it,
`Infer::generate_stream` / `Infer::generate` carry the same names (streamed: under an `async_stream` span), so a
request is a handler-named span whose parent is none of those; under them a `queued` span per wait in the queue, an
`infer` span per forward pass the request rode in, and a `send_generation` span per generation sent. At the `trace`
log filter OtelAxumLayer adds the only SERVER span (`POST /generate_stream`), which then bounds the request.
Mapping (stage spans are the handler's descendants, not its whole trace):
  arrival / end = the SERVER span's start / end when there is one, else the handler span's;
  frontend = validation_time (handler start → queued) + (handler start − arrival); queue = queue_time (else the
  `queued` spans); first token = start of the first `send_generation`; prefill = first token − start of the first
  `infer`; decode = last `send_generation` − first; postprocess = end − end of the last `send_generation`.
Without `send_generation` spans, prefill, decode and TTFT are NULL (the inference time is then unaccounted).
Instants (derive/instants.py): queue start = the first `queued` span's start, scheduled = the first `infer` span's
start, first / last token = the first / last `send_generation` start.
`output_tokens` counts `send_generation` spans: one a token, except under speculative decoding.

Headers (non-streaming responses only; `budgetscope load --no-stream` keeps them on the client span):
`x-validation-time` → frontend, `x-queue-time` → queue, `x-total-time` → server E2E (integer ms each);
`x-inference-time` is prefill + decode together, which the headers cannot split: it stays in `unaccounted`.
`x-prompt-tokens`, `x-generated-tokens` → tokens. A request with TGI spans ignores its headers.
"""

from __future__ import annotations

from budgetscope.derive import client
from budgetscope.derive.classify import TGI_ROOTS, TGI_SERVICE_PREFIX, TGI_STREAM_WRAPPER, has_key
from budgetscope.derive.server_row import select_list
from budgetscope.derive.span_tree import descendants

EVENTS_READ: tuple[str, ...] = ("%",)
"""TGI's span events are its log lines (tracing events: `Success`, an error's message), read as a class: an
ERROR one sets its span's status, which this adapter reads; their names carry no timing."""

H = "http.response.header."
HEADER_ATTRS = (
    client.ATTRS[:-1]
    + "".join(
        f',"{H}{h}":"VARCHAR[]"'
        for h in (
            "x-total-time",
            "x-validation-time",
            "x-queue-time",
            "x-inference-time",
            "x-prompt-tokens",
            "x-generated-tokens",
        )
    )
    + "}"
)
CLAIMS = has_key(f"{H}x-total-time")
"""SQL over a client span: TGI's timing headers are on it."""
ROOT_ATTRS = (
    '{"validation_time":"VARCHAR","queue_time":"VARCHAR","inference_time":"VARCHAR",'
    '"total_time":"VARCHAR","budgetscope.tier":"VARCHAR","budgetscope.tenant":"VARCHAR"}'
)


def duration_ms(text: str) -> str:
    """SQL: a Rust `Duration` Debug string (`1.2s`, `12.3ms`, `850µs`, `120ns`) → ms as DOUBLE (NULL if not one)."""
    m = f"regexp_extract({text}, '^\\s*([0-9]+(?:\\.[0-9]+)?)\\s*(ns|µs|us|ms|s)\\s*$', ['v', 'u'])"
    return (
        f"(SELECT TRY_CAST(x.v AS DOUBLE) * CASE x.u WHEN 's' THEN 1e3 WHEN 'ms' THEN 1 WHEN 'µs' THEN 1e-3 "
        f"WHEN 'us' THEN 1e-3 WHEN 'ns' THEN 1e-6 END FROM (SELECT unnest({m})) x)"
    )


def header_rows(spans: str) -> str:
    """SELECT: one row per client span of `spans` carrying TGI's timing headers."""

    def h(name: str) -> str:
        return f'TRY_CAST(a."{H}{name}"[1] AS DOUBLE)'

    rows = select_list(
        **(
            client.common("tgi")
            | dict(
                input_tokens=f'coalesce({h("x-prompt-tokens")}, a."gen_ai.usage.input_tokens")',
                output_tokens=f'coalesce({h("x-generated-tokens")}, a."gen_ai.usage.output_tokens")',
                frontend_ms=h("x-validation-time"),
                queue_ms=h("x-queue-time"),
                ttft_frontend_ms=h("x-validation-time"),
                ttft_queue_ms=h("x-queue-time"),
                e2e_ms=h("x-total-time"),
            )
        )
    )
    return f"SELECT {rows} FROM ({client.client_spans(f'(SELECT * FROM {spans} WHERE {CLAIMS})', HEADER_ATTRS)})"


HANDLER_PARENTS = (*TGI_ROOTS, TGI_STREAM_WRAPPER)
"""A span of these names above a `TGI_ROOTS` span makes it TGI's inner `Infer` span, not a request."""


_WALKED = ("name", "start_ns", "end_ns", "status_code")
"""What the walk carries of each stage span."""


def span_rows(spans: str) -> str:
    """SELECT: one row per TGI request (its HTTP handler span) in `spans`.

    A handler is a `TGI_ROOTS` span whose parent is none of `HANDLER_PARENTS`: `Infer::generate_stream` and
    `Infer::generate` carry the same names one or two levels below it. Its stage spans are its descendants (not its
    trace: one client trace may hold many requests). `h` is OtelAxumLayer's SERVER span (trace filter only): the
    handler's parent, or, where a traceparent re-parented the handler, its sibling under the client span."""
    tgi = f"(SELECT * FROM {spans} WHERE starts_with(coalesce(service_name, ''), '{TGI_SERVICE_PREFIX}'))"
    names = ", ".join(f"'{r}'" for r in TGI_ROOTS)
    parents = ", ".join(f"'{r}'" for r in HANDLER_PARENTS)
    arrival = "coalesce(h.start_ns, r.start_ns)"
    end = "coalesce(h.end_ns, r.end_ns)"
    # the SERVER span opens before the handler (body read, JSON parsed): that lead is frontend time too
    frontend = f"r.fe + (r.start_ns - {arrival}) / 1e6"
    rows = select_list(
        trace_id="r.trace_id",
        server_span_id="coalesce(h.span_id, r.span_id)",
        parent_span_id="CASE WHEN h.span_id IS NULL THEN r.parent_span_id ELSE h.parent_span_id END",
        source="'tgi'",
        request_id="r.span_id",
        service_name="r.service_name",
        model="NULL",
        tier="""coalesce(r.a."budgetscope.tier", 'default')""",
        tenant='r.a."budgetscope.tenant"',
        outcome="CASE WHEN e.failed OR h.status_code = 'ERROR' THEN 'error' ELSE 'ok' END",
        arrival_ns=arrival,
        first_token_ns="g.first_ns",
        end_ns=end,
        queue_start_ns="q.first_ns",
        scheduled_ns="i.first_infer_ns",
        last_token_ns="g.last_ns",
        output_tokens="g.n",
        frontend_ms=frontend,
        queue_ms="qu",
        ttft_frontend_ms=frontend,
        ttft_queue_ms="qu",
        prefill_ms="(g.first_ns - i.first_infer_ns) / 1e6",
        ttft_prefill_ms="(g.first_ns - i.first_infer_ns) / 1e6",
        decode_ms="(g.last_ns - g.first_ns) / 1e6",
        postprocess_ms=f"({end} - g.last_end_ns) / 1e6",
        ttft_ms=f"(g.first_ns - {arrival}) / 1e6",
        e2e_ms=f"({end} - {arrival}) / 1e6",
        queue_entries="q.n",
    )
    return f"""
WITH RECURSIVE t AS {tgi},
r0 AS (
  SELECT t.*, json_transform(t.attributes, '{ROOT_ATTRS}') AS a FROM t
  WHERE t.name IN ({names}) AND NOT EXISTS (
    SELECT 1 FROM t p WHERE p.trace_id = t.trace_id AND p.span_id = t.parent_span_id AND p.name IN ({parents}))),
d(request_id, trace_id, span_id, {", ".join(_WALKED)}) AS ({descendants("r0", "t", _WALKED)}),
k AS (SELECT request_id, {", ".join(_WALKED)} FROM d),
-- an ERROR event sets its span's status (tracing-opentelemetry): TGI logs a failure in the span where it happens
e AS (SELECT request_id, bool_or(status_code = 'ERROR') AS failed FROM k GROUP BY 1),
q AS (SELECT request_id, count(*) AS n, sum(end_ns - start_ns) / 1e6 AS ms, min(start_ns) AS first_ns
      FROM k WHERE name = 'queued' GROUP BY 1),
i AS (SELECT request_id, min(start_ns) AS first_infer_ns FROM k WHERE name = 'infer' GROUP BY 1),
g AS (SELECT request_id, count(*) AS n, min(start_ns) AS first_ns, max(start_ns) AS last_ns, max(end_ns) AS last_end_ns
      FROM k WHERE name = 'send_generation' GROUP BY 1),
hs AS (SELECT * FROM t WHERE kind = 'SERVER' AND json_exists(attributes, '$."http.route"')),
h AS (
  SELECT hs.*, r0.span_id AS request_id FROM r0 JOIN hs ON hs.trace_id = r0.trace_id AND hs.span_id = r0.parent_span_id
  UNION ALL
  -- re-parented onto the client span: paired only where that parent holds one handler and one SERVER span
  SELECT hs.*, r0.span_id FROM r0 JOIN hs ON hs.trace_id = r0.trace_id AND hs.parent_span_id = r0.parent_span_id
  WHERE (SELECT count(*) FROM hs x WHERE x.trace_id = r0.trace_id AND x.parent_span_id = r0.parent_span_id) = 1
    AND (SELECT count(*) FROM r0 x WHERE x.trace_id = r0.trace_id AND x.parent_span_id = r0.parent_span_id) = 1),
r AS (SELECT r0.*, coalesce({duration_ms('r0.a."validation_time"')}, (q.first_ns - r0.start_ns) / 1e6) AS fe,
             coalesce({duration_ms('r0.a."queue_time"')}, q.ms) AS qu
      FROM r0 LEFT JOIN q ON q.request_id = r0.span_id)
SELECT {rows}
FROM r LEFT JOIN h ON h.request_id = r.span_id
LEFT JOIN q ON q.request_id = r.span_id LEFT JOIN i ON i.request_id = r.span_id
LEFT JOIN g ON g.request_id = r.span_id LEFT JOIN e ON e.request_id = r.span_id
"""
