"""SGLang adapter: its request trace (`--enable-trace --otlp-traces-endpoint`) → server rows.

SGLang (python/sglang/srt/tracing/trace.py) opens a root span `Req <rid[:8]>` with attribute `rid` per request,
a span per process thread under it, and a span per stage slice under those, named by `RequestStage`
(python/sglang/srt/tracing/req_time_stats.py, later observability/req_time_stats.py): `tokenize`,
`dispatch` / `api_server_dispatch`, `dc_dispatch` / `dpc_dispatch`, `request_process`, `prefill_waiting`,
`prefill_forward`, `chunked_prefill`, `decode_loop`, `decode_forward`. When the request finishes, the
tokenizer manager sets `gen_ai.latency.time_to_first_token`, `gen_ai.latency.e2e` (seconds, from the request's
creation) and `gen_ai.usage.prompt_tokens` / `completion_tokens` on the root.
Mapping (slices of the root's trace):
  frontend = end of the last tokenize/dispatch/request_process slice − root start,
  queue    = sum of `prefill_waiting` slices,
  first token = root start + time_to_first_token (else the end of the last prefill slice),
  prefill  = first token − end of the last `prefill_waiting` (chunk waits included),
  decode   = end of the last decode slice − first token,
  postprocess = root start + e2e (else root end) − end of the last decode slice.
A stage whose slices were not exported (trace level too low) is NULL.
"""

from __future__ import annotations

from budgetscope.sources.classify import SGLANG_ROOT_PREFIX, SGLANG_SLICES
from budgetscope.sources.server_row import select_list

ATTRS = ('{"rid":"VARCHAR","gen_ai.request.id":"VARCHAR","gen_ai.response.model":"VARCHAR",'
         '"gen_ai.request.model":"VARCHAR","gen_ai.usage.prompt_tokens":"BIGINT",'
         '"gen_ai.usage.completion_tokens":"BIGINT","gen_ai.usage.cached_tokens":"BIGINT",'
         '"gen_ai.latency.time_to_first_token":"DOUBLE","gen_ai.latency.e2e":"DOUBLE",'
         '"budgetscope.tier":"VARCHAR","budgetscope.tenant":"VARCHAR"}')
FRONTEND = ("tokenize", "dispatch", "api_server_dispatch", "dc_dispatch", "dpc_dispatch", "request_process")
PREFILL = ("prefill_forward", "chunked_prefill")
DECODE = ("decode_loop", "decode_forward")


def _in(names: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{n}'" for n in names) + ")"


def server_rows(spans: str) -> str:
    """SELECT: one row per SGLang `Req …` root span in `spans` (one request per trace)."""
    first = ("coalesce(r.start_ns + CAST(r.a.\"gen_ai.latency.time_to_first_token\" * 1e9 AS BIGINT), "
             "s.prefill_end)")
    end = "coalesce(r.start_ns + CAST(r.a.\"gen_ai.latency.e2e\" * 1e9 AS BIGINT), r.end_ns)"
    rows = select_list(
        trace_id="r.trace_id", server_span_id="r.span_id", parent_span_id="r.parent_span_id", source="'sglang'",
        request_id='coalesce(r.a."gen_ai.request.id", r.a."rid")', service_name="r.service_name",
        model='coalesce(r.a."gen_ai.response.model", r.a."gen_ai.request.model")',
        tier="""coalesce(r.a."budgetscope.tier", 'default')""", tenant='r.a."budgetscope.tenant"',
        outcome="CASE WHEN r.status_code = 'ERROR' THEN 'error' ELSE 'ok' END",
        arrival_ns="r.start_ns", first_token_ns="f", end_ns=end,
        input_tokens='r.a."gen_ai.usage.prompt_tokens"', cached_tokens='r.a."gen_ai.usage.cached_tokens"',
        output_tokens='r.a."gen_ai.usage.completion_tokens"',
        frontend_ms="(s.frontend_end - r.start_ns) / 1e6", ttft_frontend_ms="(s.frontend_end - r.start_ns) / 1e6",
        queue_ms="s.queue_ms", ttft_queue_ms="s.queue_ms",
        prefill_ms="(f - s.queue_end) / 1e6", ttft_prefill_ms="(f - s.queue_end) / 1e6",
        decode_ms="(s.decode_end - f) / 1e6", postprocess_ms=f"({end} - s.decode_end) / 1e6",
        ttft_ms="(f - r.start_ns) / 1e6", e2e_ms=f"({end} - r.start_ns) / 1e6", queue_entries="s.queue_n",
    )
    return f"""
WITH r0 AS (
  SELECT trace_id, span_id, parent_span_id, start_ns, end_ns, service_name, status_code,
         json_transform(attributes, '{ATTRS}') AS a
  FROM {spans} WHERE starts_with(name, '{SGLANG_ROOT_PREFIX}') AND json_exists(attributes, '$.rid')),
s AS (
  SELECT trace_id,
    max(end_ns) FILTER (WHERE name IN {_in(FRONTEND)}) AS frontend_end,
    sum(end_ns - start_ns) FILTER (WHERE name = 'prefill_waiting') / 1e6 AS queue_ms,
    CAST(count(*) FILTER (WHERE name = 'prefill_waiting') AS INTEGER) AS queue_n,
    max(end_ns) FILTER (WHERE name = 'prefill_waiting') AS queue_end,
    max(end_ns) FILTER (WHERE name IN {_in(PREFILL)}) AS prefill_end,
    max(end_ns) FILTER (WHERE name IN {_in(DECODE)}) AS decode_end
  FROM {spans} WHERE name IN {_in(SGLANG_SLICES)} GROUP BY trace_id),
r AS (SELECT r0.*, s.prefill_end FROM r0 LEFT JOIN s ON s.trace_id = r0.trace_id)
SELECT {rows}
FROM (SELECT r.*, {first} AS f FROM r LEFT JOIN s ON s.trace_id = r.trace_id) r
LEFT JOIN s ON s.trace_id = r.trace_id
"""
