"""SGLang adapter: its request trace (`--enable-trace --otlp-traces-endpoint`) → server rows.

SGLang (python/sglang/srt/observability/trace.py, req_time_stats.py) opens, per request, a root span
`f"{role} Req {rid[:8]}"` (attribute `rid`; role `""` on a single server, so the name begins with a space;
`prefill` / `decode` under PD disaggregation, with attribute `bootstrap_room`; the first tracing version wrote
`Req <rid>`), a span per thread under it (attribute `thread_label`), and a span per stage slice under those,
named by `RequestStage`. A slice is exported only when its level ≤ `SGLANG_TRACE_LEVEL` (default 3):
  level 1: tokenize, prefill_waiting, prefill_forward, decode_waiting, decode_forward (and the PD slices);
  level 2: + api_server_dispatch, dpc_dispatch, request_process;
  level 3: + chunked_prefill (inside prefill_forward), decode_loop (inside decode_forward), fake_output.
The root ends when the tokenizer manager finishes the request; `gen_ai.latency.time_to_first_token` (seconds
from the root start) is set on it, `gen_ai.latency.e2e` is not (it is computed before the finish time), and
`time_in_model_prefill` includes IPC and the scheduler queue, so neither is used.

A request is a unified root, or a `decode` root with the `prefill` root of the same trace and bootstrap room
(a `prefill` root is never a request of its own). The "prefill side" is the unified root, or the prefill root.
Mapping (ns times; a stage whose slices are missing is NULL):
  arrival  = earliest root start of the request,
  frontend = start of the prefill side's first wait (`prefill_bootstrap` / `prefill_waiting`; else the end of
             `request_process` / `prefill_prepare`) − arrival,
  queue    = Σ `prefill_bootstrap` + `prefill_waiting` of the prefill side, + Σ `decode_waiting` of a decode root
             (under PD the decode instance's wait comes before the first token),
  first token = decode/unified root start + time_to_first_token (unified: else the end of prefill, i.e. of the
             first `prefill_forward`: after a retract the request is prefilled again inside decode),
  prefill  = first token − end of the prefill side's last wait − the decode root's `decode_waiting`,
  decode   = end of the last `decode_forward` / `decode_loop` − first token (a unified `decode_waiting`, after
             the first token, is inside it),
  postprocess = root end (or start + e2e where a version set it) − end of the last decode slice,
  itl      = (level 3) gaps between the end of prefill and each `decode_loop` end (scheduler clock).
Instants (derive/instants.py): queue start = the prefill side's first wait's start, scheduled = its last wait's end,
last token = the end of the last decode slice.
"""

from __future__ import annotations

from budgetscope.derive.classify import SGLANG_ROOT_SQL
from budgetscope.derive.server_row import select_list

EVENTS_READ: tuple[str, ...] = ("schedule",)
"""The span events SGLang's trace carries that this adapter knows: `schedule` (level 3, inside `decode_loop`, whose
bounds it reads). `retract` is not read: the re-queue after a retract stays inside decode, and the report names it."""

ATTRS = (
    '{"rid":"VARCHAR","bootstrap_room":"VARCHAR","gen_ai.request.id":"VARCHAR",'
    '"gen_ai.response.model":"VARCHAR","gen_ai.request.model":"VARCHAR",'
    '"gen_ai.response.finish_reasons":"VARCHAR","gen_ai.usage.prompt_tokens":"BIGINT",'
    '"gen_ai.usage.completion_tokens":"BIGINT","gen_ai.usage.cached_tokens":"BIGINT",'
    '"gen_ai.latency.time_to_first_token":"DOUBLE","gen_ai.latency.e2e":"DOUBLE",'
    '"budgetscope.tier":"VARCHAR","budgetscope.tenant":"VARCHAR"}'
)
FRONTEND_END = ("request_process", "prefill_prepare")
"""Slices that end where the frontend ends (the scheduler's receive → enqueue), read when no wait slice was
exported (a request aborted while it waited)."""
WAIT = ("prefill_bootstrap", "prefill_waiting")
DECODE = ("decode_loop", "decode_forward")
MAX_DEPTH = 8
"""Spans below a root the walk follows: SGLang nests at most thread → decode_forward → decode_forward →
decode_loop; the bound also ends the walk on a trace whose parent links loop."""


_SLICE = "STRUCT(name VARCHAR, start_ns BIGINT, end_ns BIGINT, status_code VARCHAR)"
"""What the walk carries of each slice."""


def _in(names: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{n}'" for n in names) + ")"


def _slices(spans: str) -> str:
    """SELECT: per SGLang root, the bounds of its slices (ns) and their sums (ms).

    A slice hangs off a thread span or off an enclosing slice (chunked_prefill, decode_loop, fake_output; after
    a retract a second decode_forward opens inside the first), so the walk descends from each root as deep as
    the spans go, stopping at another root; a trace may hold several roots (a PD pair, or one client trace). It
    crosses every span of the trace: the first tracing version's thread spans carry no `thread_label`."""
    return f"""
WITH RECURSIVE sg AS (
  SELECT trace_id, span_id, parent_span_id, name, start_ns, end_ns, status_code,
         source = 'sglang' AND {SGLANG_ROOT_SQL} AS is_root
  FROM {spans}),
-- the walk carries each slice's own columns (`v`): no join back to the spans
tree(trace_id, span_id, root_id, depth, v) AS (
  SELECT trace_id, span_id, span_id, 0, NULL::{_SLICE} FROM sg WHERE is_root
  UNION ALL
  SELECT s.trace_id, s.span_id, t.root_id, t.depth + 1, struct_pack(s.name, s.start_ns, s.end_ns, s.status_code)
  FROM sg s JOIN tree t ON s.trace_id = t.trace_id AND s.parent_span_id = t.span_id
  WHERE NOT s.is_root AND t.depth < {MAX_DEPTH}),
-- each span once under a root, however many paths reach it (a span id sent twice): its least version
up AS (SELECT trace_id, root_id, v.* FROM (
         SELECT trace_id, span_id, root_id, min(v) AS v FROM tree WHERE depth > 0 GROUP BY trace_id, span_id, root_id))
SELECT trace_id, root_id,
  bool_or(status_code = 'ERROR') AS failed,
  max(end_ns) FILTER (WHERE name IN {_in(FRONTEND_END)}) AS frontend_end,
  min(start_ns) FILTER (WHERE name IN {_in(WAIT)}) AS wait_start,
  max(end_ns) FILTER (WHERE name IN {_in(WAIT)}) AS wait_end,
  sum(end_ns - start_ns) FILTER (WHERE name IN {_in(WAIT)}) / 1e6 AS wait_ms,
  CAST(count(*) FILTER (WHERE name = 'prefill_waiting') AS INTEGER) AS wait_n,
  sum(end_ns - start_ns) FILTER (WHERE name = 'decode_waiting') / 1e6 AS dwait_ms,
  CAST(count(*) FILTER (WHERE name = 'decode_waiting') AS INTEGER) AS dwait_n,
  coalesce(min(end_ns) FILTER (WHERE name = 'prefill_forward'),
           max(end_ns) FILTER (WHERE name = 'chunked_prefill')) AS prefill_end,
  max(end_ns) FILTER (WHERE name IN {_in(DECODE)}) AS decode_end,
  list(end_ns ORDER BY end_ns) FILTER (WHERE name = 'decode_loop') AS loop_ends
FROM up GROUP BY trace_id, root_id"""


def _requests(spans: str) -> str:
    """SELECT: one row per request: its root `d` (unified, old-style or decode), the PD partner `p` (the latest
    prefill root of the same trace and bootstrap room, else NULL), and the slice figures of both (`sd`, and `sp` for
    the prefill side: the partner's, or the unified root's own)."""
    roots = f"""(SELECT trace_id, span_id, parent_span_id, start_ns, end_ns, service_name, status_code,
         CASE WHEN starts_with(name, 'prefill ') THEN 'prefill' WHEN starts_with(name, 'decode ') THEN 'decode'
              WHEN starts_with(name, 'router ') THEN 'router' ELSE 'unified' END AS role,
         json_transform(attributes, '{ATTRS}') AS a
       FROM {spans} WHERE source = 'sglang' AND {SGLANG_ROOT_SQL})"""
    return f"""
WITH roots AS {roots}, sl AS ({_slices(spans)})
SELECT d.trace_id, d.span_id, d.parent_span_id, d.start_ns, d.end_ns, d.service_name, d.role, d.a,
  p.start_ns AS p_start, p.a."gen_ai.usage.cached_tokens" AS p_cached,
  d.status_code = 'ERROR' OR coalesce(sd.failed, false) OR coalesce(sp.failed, false)
    OR coalesce(contains(d.a."gen_ai.response.finish_reasons", '"abort"'), false) AS failed,
  sp.frontend_end, sp.wait_start, sp.wait_end, sp.wait_n, sp.prefill_end,
  sp.wait_ms + CASE WHEN d.role = 'decode' THEN coalesce(sd.dwait_ms, 0) ELSE 0 END AS queue_ms,
  sp.wait_n + CASE WHEN d.role = 'decode' THEN sd.dwait_n ELSE 0 END AS queue_n,
  CASE WHEN d.role = 'decode' THEN coalesce(sd.dwait_ms, 0) ELSE 0 END AS dwait_ms,
  sd.decode_end, sd.loop_ends
FROM roots d
LEFT JOIN roots p ON d.role = 'decode' AND p.role = 'prefill' AND p.trace_id = d.trace_id
  AND p.a.bootstrap_room = d.a.bootstrap_room
LEFT JOIN sl sd ON sd.trace_id = d.trace_id AND sd.root_id = d.span_id
LEFT JOIN sl sp ON sp.trace_id = d.trace_id
  AND sp.root_id = CASE WHEN d.role = 'decode' THEN p.span_id ELSE d.span_id END
WHERE d.role IN ('unified', 'decode')
-- a prefill sent twice for one room: the later one served the decode (one row a request, still)
QUALIFY row_number() OVER (PARTITION BY d.trace_id, d.span_id ORDER BY p.start_ns DESC NULLS LAST) = 1"""


def server_rows(spans: str) -> str:
    """SELECT: one row per SGLang request in `spans` (a unified root, or a decode root with its prefill root)."""
    arrival = "least(r.start_ns, r.p_start)"
    first = (
        'coalesce(r.start_ns + CAST(round(r.a."gen_ai.latency.time_to_first_token" * 1e9) AS BIGINT), '
        "CASE WHEN r.role = 'unified' THEN r.prefill_end END)"
    )
    end = 'coalesce(r.start_ns + CAST(round(r.a."gen_ai.latency.e2e" * 1e9) AS BIGINT), r.end_ns)'
    frontend = f"(coalesce(r.wait_start, r.frontend_end) - {arrival}) / 1e6"
    queue = "CASE WHEN r.wait_start IS NOT NULL THEN r.queue_ms END"
    prefill = "(f - r.wait_end) / 1e6 - r.dwait_ms"
    # level 3: the first token left the scheduler at the end of prefill, each later one at a decode_loop end
    itl = (
        "CASE WHEN r.prefill_end IS NOT NULL THEN list_transform(range(1, array_length(r.loop_ends) + 1), lambda i: "
        "(r.loop_ends[i] - CASE WHEN i = 1 THEN r.prefill_end ELSE r.loop_ends[i - 1] END) / 1e6) END"
    )
    rows = select_list(
        trace_id="r.trace_id",
        server_span_id="r.span_id",
        parent_span_id="r.parent_span_id",
        source="'sglang'",
        request_id='coalesce(r.a."gen_ai.request.id", r.a."rid")',
        service_name="r.service_name",
        model='coalesce(r.a."gen_ai.response.model", r.a."gen_ai.request.model")',
        tier="""coalesce(r.a."budgetscope.tier", 'default')""",
        tenant='r.a."budgetscope.tenant"',
        outcome="CASE WHEN r.failed THEN 'error' ELSE 'ok' END",
        arrival_ns=arrival,
        first_token_ns="f",
        end_ns=end,
        queue_start_ns="r.wait_start",
        scheduled_ns="r.wait_end",
        last_token_ns="r.decode_end",
        input_tokens='r.a."gen_ai.usage.prompt_tokens"',
        cached_tokens="""CASE WHEN r.role = 'decode' THEN r.p_cached ELSE r.a."gen_ai.usage.cached_tokens" END""",
        output_tokens='r.a."gen_ai.usage.completion_tokens"',
        frontend_ms=frontend,
        ttft_frontend_ms=frontend,
        queue_ms=queue,
        ttft_queue_ms=queue,
        prefill_ms=prefill,
        ttft_prefill_ms=prefill,
        decode_ms="(r.decode_end - f) / 1e6",
        postprocess_ms=f"({end} - r.decode_end) / 1e6",
        ttft_ms=f"(f - {arrival}) / 1e6",
        e2e_ms=f"({end} - {arrival}) / 1e6",
        itl_ms=itl,
        queue_entries="CASE WHEN r.wait_start IS NOT NULL THEN r.queue_n END",
    )
    return f"SELECT {rows}\nFROM (SELECT r.*, {first} AS f FROM ({_requests(spans)}) r) r"
