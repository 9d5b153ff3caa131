"""Native adapter: the budgetscope span contract (root `llm.request`, children `stage.<stage>`) → server rows.

Stage durations add up over repeated spans (preemption, chunked prefill). The first output token is the root's
`budgetscope.first_token_unix_nano` when the producer records it (exact even after a preemption during
decode); otherwise the start of the first `stage.decode` span, or, without one, the end of the last
`stage.prefill` span (the rule of docs/design.md, which holds whenever no prefill follows the first token).
TTFT components are each stage's time clipped to [arrival, first token], so a re-queue after the first
token counts in `queue_ms` but not in `ttft_queue_ms`.
Instants (derive/instants.py): queue start = the first `stage.queue` span's start, scheduled = the first
`stage.prefill` span's start, last token = the last `stage.decode` span's end; the stages are the spans' sums.
"""

from __future__ import annotations

from budgetscope.derive.classify import NATIVE_ROOT_SQL, STAGE_PREFIX

EVENTS_READ: tuple[str, ...] = ()
"""Span events this adapter reads (derive/unread_events.py): none, the span contract has none."""

ROOT_ATTRS = (
    '{"gen_ai.request.model":"VARCHAR","gen_ai.response.model":"VARCHAR","gen_ai.response.id":"VARCHAR",'
    '"gen_ai.usage.input_tokens":"BIGINT","gen_ai.usage.output_tokens":"BIGINT",'
    '"gen_ai.usage.cache_read.input_tokens":"BIGINT","budgetscope.tier":"VARCHAR",'
    '"budgetscope.tenant":"VARCHAR","budgetscope.outcome":"VARCHAR","budgetscope.first_token_unix_nano":"BIGINT"}'
)


def _ms(expr: str) -> str:
    return f"({expr}) / 1e6"


def server_rows(spans: str) -> str:
    """SELECT producing one server row per native root span found in the relation `spans`.

    The stage spans are aggregated per parent before they meet their root (two small keys to group by, not
    the root's typed attributes): first the marks that fix the first token, then the sums clipped to it."""
    clip = "greatest(0, least(st.end_ns, r.first_token_ns) - greatest(st.start_ns, r.start_ns))"

    def stage_sum(stage: str) -> str:
        return f"sum(st.end_ns - st.start_ns) FILTER (WHERE st.stage = '{stage}') AS {stage}_ns"

    def ttft_sum(stage: str) -> str:
        return f"sum({clip}) FILTER (WHERE st.stage = '{stage}') AS ttft_{stage}_ns"

    def ms(col: str) -> str:
        return f"{_ms(f'coalesce(s.{col}_ns, 0)')} AS {col}_ms"

    stages = ("frontend", "queue", "prefill", "decode", "postprocess")
    ttft_stages = ("frontend", "queue", "prefill")
    return f"""
WITH roots AS (
  SELECT trace_id, span_id, parent_span_id, start_ns, end_ns, service_name, status_code,
         json_transform(attributes, '{ROOT_ATTRS}') AS a
  FROM {spans} WHERE {NATIVE_ROOT_SQL}),
st AS (
  SELECT trace_id, parent_span_id, substr(name, {len(STAGE_PREFIX) + 1}) AS stage, start_ns, end_ns,
         CASE WHEN name = '{STAGE_PREFIX}decode'
              THEN TRY_CAST(attributes->'budgetscope.decode.itl_ms' AS DOUBLE[]) END AS itl
  FROM {spans} WHERE starts_with(name, '{STAGE_PREFIX}')),
marks AS (
  SELECT trace_id, parent_span_id, min(start_ns) FILTER (WHERE stage = 'decode') AS decode_start_ns,
         max(end_ns) FILTER (WHERE stage = 'prefill') AS prefill_end_ns,
         min(start_ns) FILTER (WHERE stage = 'queue') AS queue_start_ns,
         min(start_ns) FILTER (WHERE stage = 'prefill') AS scheduled_ns,
         max(end_ns) FILTER (WHERE stage = 'decode') AS last_token_ns
  FROM st GROUP BY trace_id, parent_span_id),
rf AS (
  SELECT r.*, coalesce(r.a."budgetscope.first_token_unix_nano", m.decode_start_ns, m.prefill_end_ns) AS first_token_ns,
         m.queue_start_ns, m.scheduled_ns, m.last_token_ns
  FROM roots r LEFT JOIN marks m ON m.trace_id = r.trace_id AND m.parent_span_id = r.span_id),
sums AS (
  SELECT st.trace_id, st.parent_span_id, {", ".join(stage_sum(x) for x in stages)},
         {", ".join(ttft_sum(x) for x in ttft_stages)},
         flatten(list(st.itl ORDER BY st.start_ns) FILTER (WHERE st.itl IS NOT NULL)) AS itl_ms,
         CAST(count(*) FILTER (WHERE st.stage = 'queue') AS INTEGER) AS queue_entries
  FROM st JOIN rf r ON st.trace_id = r.trace_id AND st.parent_span_id = r.span_id
  GROUP BY st.trace_id, st.parent_span_id)
SELECT r.trace_id, r.span_id AS server_span_id, r.parent_span_id, 'native' AS source,
  coalesce(r.a."gen_ai.response.id", r.span_id) AS request_id, r.service_name,
  coalesce(r.a."gen_ai.request.model", r.a."gen_ai.response.model") AS model,
  coalesce(r.a."budgetscope.tier", 'default') AS tier, r.a."budgetscope.tenant" AS tenant,
  coalesce(r.a."budgetscope.outcome", CASE WHEN r.status_code = 'ERROR' THEN 'error' ELSE 'ok' END) AS outcome,
  r.start_ns AS arrival_ns, r.first_token_ns, r.end_ns, r.queue_start_ns, r.scheduled_ns, r.last_token_ns,
  r.a."gen_ai.usage.input_tokens" AS input_tokens, r.a."gen_ai.usage.cache_read.input_tokens" AS cached_tokens,
  r.a."gen_ai.usage.output_tokens" AS output_tokens,
  {", ".join(ms(x) for x in stages)},
  {", ".join(ms("ttft_" + x) for x in ttft_stages)},
  {_ms("r.first_token_ns - r.start_ns")} AS ttft_ms, {_ms("r.end_ns - r.start_ns")} AS e2e_ms,
  s.itl_ms, coalesce(s.queue_entries, 0) AS queue_entries
FROM rf r
LEFT JOIN sums s ON s.trace_id = r.trace_id AND s.parent_span_id = r.span_id
"""
