"""vLLM adapter: its `llm_request` SERVER span (scope `vllm.llm_engine`) → server rows.

Attribute names as defined in vLLM's `vllm/tracing.py` (`SpanAttributes`) and set in
`vllm/v1/engine/output_processor.py` (`do_tracing`); all latencies are in seconds, measured from the
request's arrival (the span's start), which is after tokenization began, so network is never inside them:
  queue = time_in_queue, prefill = time_in_model_prefill, decode = time_in_model_decode,
  frontend = time_to_first_token − queue − prefill, postprocess = e2e − time_to_first_token − decode.
A stage whose attribute is missing (older vLLM) is NULL, never guessed. vLLM's spans carry no prefix-cache
count; `gen_ai.usage.cache_read.input_tokens`, set on the spans imported from offline `RequestOutput.metrics`
(sources/vllm_offline.py, `num_cached_tokens`), is read as `cached_tokens`.
"""

from __future__ import annotations

from budgetscope.sources.classify import VLLM_ROOT

ATTRS = (
    '{"gen_ai.request.id":"VARCHAR","gen_ai.response.model":"VARCHAR","gen_ai.usage.prompt_tokens":"BIGINT",'
    '"gen_ai.usage.completion_tokens":"BIGINT","gen_ai.usage.cache_read.input_tokens":"BIGINT",'
    '"gen_ai.latency.time_in_queue":"DOUBLE",'
    '"gen_ai.latency.time_to_first_token":"DOUBLE","gen_ai.latency.e2e":"DOUBLE",'
    '"gen_ai.latency.time_in_model_prefill":"DOUBLE","gen_ai.latency.time_in_model_decode":"DOUBLE",'
    '"budgetscope.tier":"VARCHAR","budgetscope.tenant":"VARCHAR"}'
)


def server_rows(spans: str) -> str:
    """SELECT producing one server row per vLLM `llm_request` span in the relation `spans`."""
    return f"""
WITH v AS (
  SELECT trace_id, span_id, parent_span_id, start_ns, end_ns, service_name, status_code,
         json_transform(attributes, '{ATTRS}') AS a
  FROM {spans} WHERE name = '{VLLM_ROOT}'),
s AS (
  SELECT *, a."gen_ai.latency.time_in_queue" * 1e3 AS q, a."gen_ai.latency.time_in_model_prefill" * 1e3 AS p,
         a."gen_ai.latency.time_in_model_decode" * 1e3 AS d, a."gen_ai.latency.time_to_first_token" * 1e3 AS ttft,
         a."gen_ai.latency.e2e" * 1e3 AS e2e
  FROM v)
SELECT trace_id, span_id AS server_span_id, parent_span_id, 'vllm' AS source,
  coalesce(a."gen_ai.request.id", span_id) AS request_id, service_name, a."gen_ai.response.model" AS model,
  coalesce(a."budgetscope.tier", 'default') AS tier, a."budgetscope.tenant" AS tenant,
  CASE WHEN status_code = 'ERROR' THEN 'error' ELSE 'ok' END AS outcome,
  start_ns AS arrival_ns, start_ns + CAST(ttft * 1e6 AS BIGINT) AS first_token_ns, end_ns,
  a."gen_ai.usage.prompt_tokens" AS input_tokens, a."gen_ai.usage.cache_read.input_tokens" AS cached_tokens,
  a."gen_ai.usage.completion_tokens" AS output_tokens,
  ttft - q - p AS frontend_ms, q AS queue_ms, p AS prefill_ms, d AS decode_ms, e2e - ttft - d AS postprocess_ms,
  ttft - q - p AS ttft_frontend_ms, q AS ttft_queue_ms, p AS ttft_prefill_ms,
  ttft AS ttft_ms, e2e AS e2e_ms, CAST(NULL AS DOUBLE[]) AS itl_ms, CAST(NULL AS INTEGER) AS queue_entries
FROM s
"""
