"""Text Generation Inference adapter: its spans (OTLP, `--otlp-endpoint`) and its `x-*-time` response headers.

Spans, as TGI's router creates them (router/src/server.rs, backends/v3/src/queue.rs and backend.rs): the
handler span (`generate`, `generate_stream`, `completions`, `chat_completions`) whose fields `validation_time`,
`queue_time`, `inference_time`, `total_time` are Rust `Duration` Debug text (`12.3ms`, `1.2s`, `850µs`); under
it a `queued` span per wait in the queue, an `infer` span per batch the request rode in, and (at info level) a
`send_generation` span per token sent. Mapping:
  frontend = validation_time (handler start → queued), queue = queue_time (else the `queued` spans),
  first token = start of the first `send_generation`; prefill = first token − start of the first `infer`;
  decode = last `send_generation` − first; postprocess = handler end − end of the last `send_generation`.
Without `send_generation` spans, prefill, decode and TTFT are NULL (the inference time is then unaccounted).

Headers (non-streaming responses only; `budgetscope load --no-stream` keeps them on the client span):
`x-validation-time` → frontend, `x-queue-time` → queue, `x-total-time` → server E2E (integer ms each);
`x-inference-time` is prefill + decode together, which the headers cannot split: it stays in `unaccounted`.
`x-prompt-tokens`, `x-generated-tokens` → tokens. A request with TGI spans ignores its headers.
"""

from __future__ import annotations

from budgetscope.sources import client
from budgetscope.sources.classify import TGI_ROOTS, TGI_SERVICE_PREFIX
from budgetscope.sources.server_row import select_list

H = "http.response.header."
HEADER_ATTRS = client.ATTRS[:-1] + "".join(
    f',"{H}{h}":"VARCHAR[]"' for h in ("x-total-time", "x-validation-time", "x-queue-time", "x-inference-time",
                                        "x-prompt-tokens", "x-generated-tokens")) + "}"
CLAIMS = f"json_exists(attributes, '$.\"{H}x-total-time\"')"
"""SQL over a client span: TGI's timing headers are on it."""
ROOT_ATTRS = ('{"validation_time":"VARCHAR","queue_time":"VARCHAR","inference_time":"VARCHAR",'
              '"total_time":"VARCHAR","budgetscope.tier":"VARCHAR","budgetscope.tenant":"VARCHAR"}')


def duration_ms(text: str) -> str:
    """SQL: a Rust `Duration` Debug string (`1.2s`, `12.3ms`, `850µs`, `120ns`) → ms as DOUBLE (NULL if not one)."""
    m = f"regexp_extract({text}, '^\\s*([0-9]+(?:\\.[0-9]+)?)\\s*(ns|µs|us|ms|s)\\s*$', ['v', 'u'])"
    return (f"(SELECT TRY_CAST(x.v AS DOUBLE) * CASE x.u WHEN 's' THEN 1e3 WHEN 'ms' THEN 1 WHEN 'µs' THEN 1e-3 "
            f"WHEN 'us' THEN 1e-3 WHEN 'ns' THEN 1e-6 END FROM (SELECT unnest({m})) x)")


def header_rows(spans: str) -> str:
    """SELECT: one row per client span of `spans` carrying TGI's timing headers."""
    def h(name: str) -> str:
        return f'TRY_CAST(a."{H}{name}"[1] AS DOUBLE)'

    rows = select_list(**(client.common("tgi") | dict(
        input_tokens=f'coalesce({h("x-prompt-tokens")}, a."gen_ai.usage.input_tokens")',
        output_tokens=f'coalesce({h("x-generated-tokens")}, a."gen_ai.usage.output_tokens")',
        frontend_ms=h("x-validation-time"), queue_ms=h("x-queue-time"),
        ttft_frontend_ms=h("x-validation-time"), ttft_queue_ms=h("x-queue-time"), e2e_ms=h("x-total-time"),
    )))
    return f"SELECT {rows} FROM ({client.client_spans(f'(SELECT * FROM {spans} WHERE {CLAIMS})', HEADER_ATTRS)})"


def span_rows(spans: str) -> str:
    """SELECT: one row per TGI handler span (the topmost TGI request span of its trace) in `spans`."""
    tgi = f"(SELECT * FROM {spans} WHERE starts_with(coalesce(service_name, ''), '{TGI_SERVICE_PREFIX}'))"
    roots = ", ".join(f"'{r}'" for r in TGI_ROOTS)
    rows = select_list(
        trace_id="r.trace_id", server_span_id="r.span_id", parent_span_id="r.parent_span_id", source="'tgi'",
        request_id="r.span_id", service_name="r.service_name", model="NULL",
        tier="""coalesce(r.a."budgetscope.tier", 'default')""", tenant='r.a."budgetscope.tenant"',
        outcome="CASE WHEN r.status_code = 'ERROR' THEN 'error' ELSE 'ok' END",
        arrival_ns="r.start_ns", first_token_ns="g.first_ns", end_ns="r.end_ns",
        output_tokens="g.n",
        frontend_ms="fe", queue_ms="qu", ttft_frontend_ms="fe", ttft_queue_ms="qu",
        prefill_ms="(g.first_ns - i.first_infer_ns) / 1e6", ttft_prefill_ms="(g.first_ns - i.first_infer_ns) / 1e6",
        decode_ms="(g.last_ns - g.first_ns) / 1e6", postprocess_ms="(r.end_ns - g.last_end_ns) / 1e6",
        ttft_ms="(g.first_ns - r.start_ns) / 1e6", e2e_ms="(r.end_ns - r.start_ns) / 1e6",
        queue_entries="q.n",
    )
    return f"""
WITH t AS {tgi},
r0 AS (
  SELECT t.*, json_transform(t.attributes, '{ROOT_ATTRS}') AS a FROM t
  WHERE t.name IN ({roots}) AND NOT EXISTS (
    SELECT 1 FROM t p WHERE p.trace_id = t.trace_id AND p.span_id = t.parent_span_id AND p.name IN ({roots}))),
q AS (SELECT trace_id, count(*) AS n, sum(end_ns - start_ns) / 1e6 AS ms, min(start_ns) AS first_ns
      FROM t WHERE name = 'queued' GROUP BY 1),
i AS (SELECT trace_id, min(start_ns) AS first_infer_ns FROM t WHERE name = 'infer' GROUP BY 1),
g AS (SELECT trace_id, count(*) AS n, min(start_ns) AS first_ns, max(start_ns) AS last_ns, max(end_ns) AS last_end_ns
      FROM t WHERE name = 'send_generation' GROUP BY 1),
r AS (SELECT r0.*, coalesce({duration_ms('r0.a."validation_time"')}, (q.first_ns - r0.start_ns) / 1e6) AS fe,
             coalesce({duration_ms('r0.a."queue_time"')}, q.ms) AS qu
      FROM r0 LEFT JOIN q ON q.trace_id = r0.trace_id)
SELECT {rows}
FROM r LEFT JOIN q ON q.trace_id = r.trace_id LEFT JOIN i ON i.trace_id = r.trace_id
LEFT JOIN g ON g.trace_id = r.trace_id
"""
