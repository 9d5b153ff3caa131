"""vLLM adapter: its `llm_request` SERVER span, in each of the modes vLLM traces in, → server rows.

Classic (`--otlp-traces-endpoint`; vllm/v1/engine/output_processor.py `do_tracing`, attribute names in
vllm/tracing `SpanAttributes`): one `llm_request` span per request, made when it finishes, starting at its
arrival, with `gen_ai.latency.*` attributes in seconds (stats in vllm/v1/metrics/stats.py):
  queue = time_in_queue, prefill = time_in_model_prefill, decode = time_in_model_decode,
  frontend = time_to_first_token − queue − prefill, postprocess = e2e − time_to_first_token − decode.
`time_in_queue` runs from the first QUEUED to the first SCHEDULED only: a wait after a preemption lands in
prefill (preempted before the first token) or decode (after it). The span carries no preemption count, so the
re-queue time cannot be taken back out.

Journey tracing (`--enable-journey-tracing`; JOURNEY_TRACING.md, vllm/v1/core/sched/scheduler.py): the
`llm_request` span (scope `vllm.api`) has no latency attributes; a child span `llm_core` (scope
`vllm.scheduler`) carries `journey.<TYPE>` span events with wall-clock times (ns), kept by ingest under
`budgetscope.events`:
  frontend = QUEUED − API span start,
  queue = QUEUED → first SCHEDULED, plus each PREEMPTED → the next SCHEDULED,
  prefill = first SCHEDULED → FIRST_TOKEN, less the re-queues before it,
  decode = FIRST_TOKEN → FINISHED, less the re-queues after it,
  postprocess = FINISHED → API span end;
  TTFT = api.FIRST_RESPONSE_FROM_CORE (else FIRST_TOKEN) − API span start.
Event times past the API span's end (the API gave up first: a client disconnect) are taken at its end. A request
that never got a first token has prefill up to FINISHED and decode NULL. Builds whose `do_tracing` still ran
also send a classic `llm_request` under the API span: one row, the journey one (the classic one when the API
span has no core events).

PD disaggregation (a proxy sends the request to a prefill instance with `max_tokens` 1, then to a decode
instance with the returned `kv_transfer_params`, the same `X-Request-Id` to both): two `llm_request` spans with
the same `gen_ai.request.id`, each a request of its own instance. When both are derived together, the prefill
leg (one output token, ended before the decode leg began) folds into the decode leg's row: one row, arrival at
the prefill leg, stages summed per stage; the decode leg's queue holds its wait for the KV transfer; the hand-off
(prefill leg's first token → decode leg's arrival, via the proxy) is unaccounted.

Instants (derive/instants.py): classic lays them out from the arrival by vLLM's intervals (first token = arrival +
time_to_first_token, scheduled = first token − time_in_model_prefill, queue start = scheduled − time_in_queue,
last token = first token + time_in_model_decode); journey reads them (QUEUED, first SCHEDULED, the first response,
FINISHED, or the first response where it came later: a one-token reply).

A stage whose figures are missing is NULL, never guessed. `gen_ai.usage.cache_read.input_tokens`, set on the
spans imported from offline `RequestOutput.metrics` (sources/vllm_offline.py, `num_cached_tokens`), is read as
`cached_tokens`.
"""

from __future__ import annotations

from budgetscope.derive.classify import VLLM_CORE, VLLM_ROOT, mentions
from budgetscope.derive.server_row import SERVER_COLUMNS, select_list
from budgetscope.schema import EVENTS_KEY

EVENTS_READ = (
    "journey.QUEUED",
    "journey.SCHEDULED",
    "journey.FIRST_TOKEN",
    "journey.PREEMPTED",
    "journey.FINISHED",
    "api.FIRST_RESPONSE_FROM_CORE",
    "api.ABORTED",
    # known and not needed: the API span's own start and end, and the hand-off inside frontend
    "api.ARRIVED",
    "api.HANDOFF_TO_CORE",
    "api.DEPARTED",
)
"""The span events of journey tracing this adapter reads or knowingly passes over (derive/unread_events.py)."""
EVENT_TIMES = '{"' + EVENTS_KEY + '":[{"name":"VARCHAR","time_unix_nano":"BIGINT"}]}'
"""The events kept on a span (ingest's `budgetscope.events`): their names and times, what every request needs."""
EVENT_ATTRS = (
    '{"' + EVENTS_KEY + '":[{"name":"VARCHAR","time_unix_nano":"BIGINT",'
    '"attributes":{"reason":"VARCHAR","prefill.total_tokens":"BIGINT"}}]}'
)
"""The same, with the event attributes read here: parsed only for the few requests that need them (`_per_span`)."""
ATTRS = (
    '{"gen_ai.request.id":"VARCHAR","gen_ai.response.model":"VARCHAR","gen_ai.usage.prompt_tokens":"BIGINT",'
    '"gen_ai.usage.completion_tokens":"BIGINT","gen_ai.usage.cache_read.input_tokens":"BIGINT",'
    '"gen_ai.latency.time_in_queue":"DOUBLE",'
    '"gen_ai.latency.time_to_first_token":"DOUBLE","gen_ai.latency.e2e":"DOUBLE",'
    '"gen_ai.latency.time_in_model_prefill":"DOUBLE","gen_ai.latency.time_in_model_decode":"DOUBLE",'
    '"budgetscope.tier":"VARCHAR","budgetscope.tenant":"VARCHAR"}'
)

_STAGES = ("frontend_ms", "queue_ms", "prefill_ms", "decode_ms", "ttft_frontend_ms", "ttft_queue_ms", "ttft_prefill_ms")
"""Summed over the two legs of a PD-disaggregated request."""

# Written in SQL that budgetscope's Spark dialect carries over (spark/dialect.py): no list comprehensions,
# QUALIFY, GROUP BY ALL or correlated subqueries; a double cast to BIGINT is rounded first (DuckDB's cast rounds,
# Spark's truncates).


EVENT_SPANS = f"name IN ('{VLLM_ROOT}', '{VLLM_CORE}')"
"""SQL over a span: one whose events `events_sql` parses (the API span and its engine-core child)."""
API_ID = f"CASE WHEN name = '{VLLM_CORE}' THEN parent_span_id ELSE span_id END"
"""SQL over such a span: the API span its events belong to."""


def events_sql(spans: str, spec: str = EVENT_TIMES) -> str:
    """SELECT: the span events of each `llm_request` and `llm_core` span of `spans`, parsed: (trace_id, source,
    api_id: the API span they belong to, events: a list of (name, time_unix_nano, attributes read)). The journey
    adapter reads them, and so does the unread-events check (derive/requests.py): parsed once. A list a span,
    not a row an event: kept for two readers, it is copied a quarter as many times. `spec`: the json_transform
    structure read (default: names and times). A span whose attributes never mention the events key (vLLM's
    classic trace: none has events) is not parsed: its events are NULL, as the parse would give them."""
    return f"""
SELECT trace_id, source, {API_ID} AS api_id,
  CASE WHEN {mentions(EVENTS_KEY)} THEN json_transform(attributes, '{spec}')."{EVENTS_KEY}" END AS events
FROM {spans} WHERE {EVENT_SPANS}"""


def _journey(spans: str, events: str | None = None) -> str:
    """SELECT: per API span (`api_id`), the times (ns) of its own `api.*` events and of its `llm_core` child's
    `journey.*` events, and the re-queue time around the first token. `events`: a relation holding
    `events_sql(spans)`'s rows (default: that SELECT, inline)."""
    return f"""
WITH ev AS (
  SELECT trace_id, api_id, e.name AS n, e.time_unix_nano AS t
  FROM (SELECT trace_id, api_id, unnest(events) AS e FROM {events or f"({events_sql(spans)})"}) x),
j AS (
  SELECT trace_id, api_id,
    CAST(count(*) FILTER (WHERE n LIKE 'journey.%') AS INTEGER) AS journey_events,
    min(t) FILTER (WHERE n = 'journey.QUEUED') AS queued,
    min(t) FILTER (WHERE n = 'journey.SCHEDULED') AS scheduled,
    min(t) FILTER (WHERE n = 'journey.FIRST_TOKEN') AS first_token,
    max(t) FILTER (WHERE n = 'journey.FINISHED') AS finished,
    CAST(count(*) FILTER (WHERE n = 'journey.PREEMPTED') AS INTEGER) AS preemptions,
    min(t) FILTER (WHERE n = 'api.FIRST_RESPONSE_FROM_CORE') AS first_response,
    CAST(count(*) FILTER (WHERE n = 'api.ABORTED') AS INTEGER) AS aborts
  FROM ev GROUP BY trace_id, api_id),
-- each preemption's wait: PREEMPTED → the next SCHEDULED (or FINISHED, when it never resumed); the window runs
-- over the requests that were preempted only (a tenth of them, say: the window over every journey event was a
-- fifth of the journey derivation)
w AS (
  SELECT trace_id, api_id, n, t,
    min(CASE WHEN n IN ('journey.SCHEDULED', 'journey.FINISHED') THEN t END) OVER (
      PARTITION BY trace_id, api_id ORDER BY t ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS resumed
  FROM ev WHERE n LIKE 'journey.%' AND (trace_id, api_id) IN (SELECT trace_id, api_id FROM j WHERE preemptions > 0)),
rq AS (
  SELECT w.trace_id, w.api_id,
    sum(CASE WHEN w.t < coalesce(j.first_token, j.finished) THEN w.resumed - w.t ELSE 0 END) AS before_first,
    sum(CASE WHEN w.t >= coalesce(j.first_token, j.finished) THEN w.resumed - w.t ELSE 0 END) AS after_first
  FROM w JOIN j ON j.trace_id = w.trace_id AND j.api_id = w.api_id
  WHERE w.n = 'journey.PREEMPTED' GROUP BY w.trace_id, w.api_id)
SELECT j.*, coalesce(rq.before_first, 0) AS requeue_before, coalesce(rq.after_first, 0) AS requeue_after
FROM j LEFT JOIN rq ON rq.trace_id = j.trace_id AND rq.api_id = j.api_id"""


def _per_span(spans: str, events: str | None = None) -> str:
    """SELECT: one server row per `llm_request` span, classic or journey, and `journey` (it has core events)."""
    # journey mode: core events and no latency attribute (a classic span may lack e2e: offline imports do)
    journey_mode = (
        'j.journey_events > 0 AND v.a."gen_ai.latency.e2e" IS NULL AND v.a."gen_ai.latency.time_to_first_token" IS NULL'
    )

    def clip(t: str) -> str:  # an engine time past the API span's end is taken at its end (NULL stays NULL)
        return f"CASE WHEN j.{t} > v.end_ns THEN v.end_ns ELSE j.{t} END"

    q, sch, ft, fin = clip("queued"), clip("scheduled"), clip("first_token"), clip("finished")
    lat = {
        k: f'v.a."gen_ai.latency.{k}" * 1e3'
        for k in ("time_in_queue", "time_in_model_prefill", "time_in_model_decode", "time_to_first_token", "e2e")
    }
    first_response = f"coalesce(j.first_response, {ft})"
    reached = f"coalesce({ft}, {fin})"  # the end of prefill: the first token, or the end of a request that had none
    journey = {
        "frontend": f"({q} - v.start_ns) / 1e6",
        "queue": f"(coalesce({sch}, {fin}) - {q} + j.requeue_before + j.requeue_after) / 1e6",
        "prefill": f"({reached} - {sch} - j.requeue_before) / 1e6",
        "decode": f"({fin} - {ft} - j.requeue_after) / 1e6",
        "ttft_queue": f"CASE WHEN {ft} IS NOT NULL THEN ({sch} - {q} + j.requeue_before) / 1e6 END",
        "ttft_prefill": f"CASE WHEN {ft} IS NOT NULL THEN ({ft} - {sch} - j.requeue_before) / 1e6 END",
    }

    def mode(classic_sql: str, journey_sql: str) -> str:
        return f"CASE WHEN {journey_mode} THEN {journey_sql} ELSE {classic_sql} END"

    frontend = f"{lat['time_to_first_token']} - {lat['time_in_queue']} - {lat['time_in_model_prefill']}"
    # classic: the instants laid out from the arrival by vLLM's own intervals
    first_classic = f"v.start_ns + CAST(round({lat['time_to_first_token']} * 1e6) AS BIGINT)"
    scheduled_classic = f"{first_classic} - CAST(round({lat['time_in_model_prefill']} * 1e6) AS BIGINT)"
    rows = select_list(
        trace_id="v.trace_id",
        server_span_id="v.span_id",
        parent_span_id="v.parent_span_id",
        source="'vllm'",
        request_id='coalesce(v.a."gen_ai.request.id", v.span_id)',
        service_name="v.service_name",
        model='v.a."gen_ai.response.model"',
        tier="""coalesce(v.a."budgetscope.tier", 'default')""",
        tenant='v.a."budgetscope.tenant"',
        outcome="""CASE WHEN xa.abort_reason = 'client_disconnect' THEN 'cancelled'
          WHEN v.status_code = 'ERROR' OR j.aborts > 0 THEN 'error' ELSE 'ok' END""",
        arrival_ns="v.start_ns",
        first_token_ns=mode(first_classic, first_response),
        end_ns="v.end_ns",
        queue_start_ns=mode(f"{scheduled_classic} - CAST(round({lat['time_in_queue']} * 1e6) AS BIGINT)", q),
        scheduled_ns=mode(scheduled_classic, sch),
        # journey: the engine's FINISHED, or the API's first response where that came later (a one-token reply)
        last_token_ns=mode(
            f"{first_classic} + CAST(round({lat['time_in_model_decode']} * 1e6) AS BIGINT)",
            f"greatest({fin}, {first_response})",
        ),
        input_tokens='coalesce(v.a."gen_ai.usage.prompt_tokens", xa.prompt_tokens)',
        cached_tokens='v.a."gen_ai.usage.cache_read.input_tokens"',
        output_tokens='v.a."gen_ai.usage.completion_tokens"',
        frontend_ms=mode(frontend, journey["frontend"]),
        queue_ms=mode(lat["time_in_queue"], journey["queue"]),
        prefill_ms=mode(lat["time_in_model_prefill"], journey["prefill"]),
        decode_ms=mode(lat["time_in_model_decode"], journey["decode"]),
        postprocess_ms=mode(
            f"{lat['e2e']} - {lat['time_to_first_token']} - {lat['time_in_model_decode']}", f"(v.end_ns - {fin}) / 1e6"
        ),
        ttft_frontend_ms=mode(frontend, f"CASE WHEN {ft} IS NOT NULL THEN {journey['frontend']} END"),
        ttft_queue_ms=mode(lat["time_in_queue"], journey["ttft_queue"]),
        ttft_prefill_ms=mode(lat["time_in_model_prefill"], journey["ttft_prefill"]),
        ttft_ms=mode(lat["time_to_first_token"], f"({first_response} - v.start_ns) / 1e6"),
        e2e_ms=mode(lat["e2e"], "(v.end_ns - v.start_ns) / 1e6"),
        queue_entries=mode("NULL", f"CASE WHEN {q} IS NOT NULL THEN 1 + j.preemptions END"),
    )
    return f"""
WITH v AS (
  SELECT trace_id, span_id, parent_span_id, start_ns, end_ns, service_name, status_code,
         json_transform(attributes, '{ATTRS}') AS a
  FROM {spans} WHERE name = '{VLLM_ROOT}'),
j AS ({_journey(spans, events)}),
-- the event attributes read (an abort's reason; the prompt's length, where the API span lacks it), parsed for the
-- requests that need them only: a parse of every event's attributes was a quarter of the journey derivation
xa AS (
  SELECT trace_id, api_id,
    max(e.attributes."prefill.total_tokens") FILTER (WHERE e.name LIKE 'journey.%') AS prompt_tokens,
    max(e.attributes.reason) FILTER (WHERE e.name = 'api.ABORTED') AS abort_reason
  FROM (SELECT p.trace_id, p.api_id, unnest(json_transform(p.attributes, '{EVENT_ATTRS}')."{EVENTS_KEY}") AS e
        FROM (SELECT trace_id, {API_ID} AS api_id, attributes FROM {spans} WHERE {EVENT_SPANS}) p
        -- joined before the parse, so that only these spans are parsed (v has one row a span)
        JOIN (SELECT v.trace_id, v.span_id FROM v JOIN j ON j.trace_id = v.trace_id AND j.api_id = v.span_id
              WHERE j.aborts > 0 OR (j.journey_events > 0 AND v.a."gen_ai.usage.prompt_tokens" IS NULL)) nd
          ON nd.trace_id = p.trace_id AND nd.span_id = p.api_id) x
  GROUP BY trace_id, api_id)
SELECT {rows}, coalesce(j.journey_events, 0) > 0 AS journey
FROM v LEFT JOIN j ON j.trace_id = v.trace_id AND j.api_id = v.span_id
LEFT JOIN xa ON xa.trace_id = v.trace_id AND xa.api_id = v.span_id"""


def _pd_row() -> str:
    """Select list of a PD-disaggregated request: decode leg `d`, prefill leg `p` (both server rows)."""
    # the decode leg's E2E is counted from its own arrival: add the time since the prefill leg's arrival
    since = "(d.arrival_ns - p.arrival_ns) / 1e6"
    out = {c: f"d.{c}" for c in SERVER_COLUMNS}
    out.update(
        {c: f"p.{c} + d.{c}" for c in _STAGES},
        arrival_ns="p.arrival_ns",
        queue_start_ns="p.queue_start_ns",
        scheduled_ns="p.scheduled_ns",
        ttft_ms=f"d.ttft_ms + {since}",
        e2e_ms=f"d.e2e_ms + {since}",
    )
    return ",\n  ".join(f"{expr} AS {c}" for c, expr in out.items())


def span_rows(spans: str, events: str | None = None) -> str:
    """SELECT: one server row per vLLM request span of `spans` (PD legs apart, not folded): the journey row where a
    build also sent a classic `llm_request` under the API span. Other adapters read vLLM's legs through it
    (derive/llmd.py)."""
    cols = ", ".join(SERVER_COLUMNS)
    return f"""
WITH r0 AS ({_per_span(spans, events)}),
-- one request, two spans: journey builds whose do_tracing still ran made a classic `llm_request` under the API
-- span's; the journey row is kept where the API span has its core events, else the classic one
dup AS (
  SELECT c.trace_id, c.server_span_id FROM r0 c JOIN r0 o
    ON o.trace_id = c.trace_id AND o.server_span_id = c.parent_span_id WHERE o.journey
  UNION ALL
  SELECT c.trace_id, c.server_span_id FROM r0 c JOIN r0 o
    ON o.trace_id = c.trace_id AND o.parent_span_id = c.server_span_id WHERE NOT c.journey)
SELECT {", ".join(f"r0.{c}" for c in SERVER_COLUMNS)}
FROM r0 LEFT JOIN dup ON dup.trace_id = r0.trace_id AND dup.server_span_id = r0.server_span_id
WHERE dup.server_span_id IS NULL"""


def _leg(col: str) -> str:
    """The server rows `r` that are a PD pair's leg (`pd.<col>`), for the join that folds each pair into one row.
    Selected by a test of membership that DuckDB keeps a mark join (the small `pd` built, `r` probed): joined to
    `r` itself, or selected by a bare `IN` or `SEMI JOIN` (which it turns into inner joins), its join order built
    a hash table of every server row, for the few pairs there are (most archives have none): 0.6 CPU-s of the
    classic derivation of 1M requests (docs/benchmarks.md, seventeenth session)."""
    return f"(SELECT * FROM r WHERE coalesce(server_span_id IN (SELECT {col} FROM pd), false))"


def server_rows(spans: str, legs: str | None = None, events: str | None = None) -> str:
    """SELECT producing one server row per vLLM request in the relation `spans` (PD legs folded into one).

    `legs`: a SELECT of (trace_id, span_id) of `llm_request` spans that are legs of another adapter's request (an
    llm-d request, derive/llmd.py): no rows of their own, and never folded with another span. `events`: a relation
    holding `events_sql(spans)`'s rows (default: that SELECT, inline)."""
    cols = ", ".join(SERVER_COLUMNS)
    kept = (
        f"""SELECT r1.* FROM ({span_rows(spans, events)}) r1 LEFT JOIN ({legs}) lg
  ON lg.trace_id = r1.trace_id AND lg.span_id = r1.server_span_id WHERE lg.span_id IS NULL"""
        if legs
        else span_rows(spans, events)
    )
    return f"""
WITH r AS ({kept}),
-- a PD pair: the prefill leg (one output token) ended before the decode leg with its request id began
pd AS (
  SELECT d_id, p_id FROM (
    SELECT d.server_span_id AS d_id, p.server_span_id AS p_id,
      row_number() OVER (PARTITION BY d.server_span_id ORDER BY p.arrival_ns DESC) AS k
    FROM r d JOIN (SELECT * FROM r WHERE output_tokens = 1) p
      ON p.request_id = d.request_id AND p.server_span_id <> d.server_span_id AND p.end_ns <= d.arrival_ns) x
  WHERE k = 1)
SELECT {cols} FROM r
WHERE server_span_id NOT IN (SELECT p_id FROM pd) AND server_span_id NOT IN (SELECT d_id FROM pd)
UNION ALL
SELECT {_pd_row()}
FROM pd JOIN {_leg("d_id")} d ON d.server_span_id = pd.d_id JOIN {_leg("p_id")} p ON p.server_span_id = pd.p_id
"""
