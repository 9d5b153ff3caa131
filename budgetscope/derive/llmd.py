"""llm-d adapter: the gateway's EPP, the P/D routing sidecar and vLLM on each leg → one server row per user request.

Read at llm-d/llm-d-router ebab687 (tests/conformance/llm-d/README.md cites the files). A request is a
`gateway.request` span (the EPP's SERVER span: the request headers → the end of the response's stream). Below it:
the routing sidecar's otelhttp SERVER span `llm_d.pd_proxy.<METHOD> <path>` → `forward_request` → under P/D
`prefill` (and on nixlv2 `decode` as its child; other connectors name them `llm_d.pd_proxy.prefill` /
`llm_d.pd_proxy.decode`) → otelhttp CLIENT `HTTP POST` → vLLM's `llm_request` (a leg); without P/D the one leg is
`forward_request`'s, and without the sidecar vLLM's span is `gateway.request`'s child. A leg belongs to the
`prefill` / `decode` span nearest above it; one under neither is the request's only leg.

The legs are read by the vLLM adapter (`vllm.span_rows`, any of its modes) and are no rows of their own. Row (ns):
  arrival, end = `gateway.request`'s bounds; first token = the decode leg's;
  gateway     = the next hop's receive (the sidecar's server span; without it the first leg's arrival) − arrival:
                the EPP (body, flow control, scheduling) and Envoy's forward;
  frontend, queue, prefill (and their TTFT parts) = the prefill leg's + the decode leg's under P/D (the decode
                leg's queue holds its wait for the KV read, WAITING_FOR_REMOTE_KVS, which vLLM's spans do not
                tell apart), the leg's own otherwise;
  kv_handoff  = the prefill leg's first token → the decode leg's arrival (the prefill response's return, the
                sidecar, the decode request); NULL without P/D;
  decode, postprocess = the decode leg's.
What lies between (the sidecar's receive → the first leg's arrival, the decode leg's end → the gateway's end) is
`unaccounted`. A stage that needs a leg whose `llm_request` is not in the trace (it lost its trace context) is NULL,
never joined by a guess; so is every sum of the legs when they overlap (a connector that sends both at once: the
decode leg arrives before the prefill leg's first token). The sidecar's `llm_d.pd_proxy.*_ms` attributes are whole
milliseconds and are not read.
"""

from __future__ import annotations

from budgetscope.derive import vllm
from budgetscope.derive.classify import HTTP_CLIENT_SQL, LLMD_DECODE, LLMD_GATEWAY, LLMD_PREFILL, LLMD_SIDECAR_SERVER
from budgetscope.derive.server_row import SERVER_COLUMNS, select_list

MAX_DEPTH = 7
"""Ancestors followed from a leg up to its `gateway.request`: HTTP POST → decode → prefill → forward_request →
the sidecar's server span → the gateway (6), and one more for a handler span in between (`chunked_decode`)."""
LEG_NAMES = (*LLMD_PREFILL, *LLMD_DECODE)
SIDECAR_LEGS = ("forward_request", "chunked_decode", *LEG_NAMES)
"""The routing sidecar's spans whose HTTP client spans are legs (chat_completions.go, decode.go, connector_*.go);
the EPP's own HTTP calls (its tokenizer) are not."""
PD_SUMS = ("frontend_ms", "queue_ms", "prefill_ms", "ttft_frontend_ms", "ttft_queue_ms", "ttft_prefill_ms")
"""Stages a P/D request takes from both legs."""


def _sidecar_server(t: str = "") -> str:
    """SQL over a span (`t`: its table alias with the dot): the routing sidecar's otelhttp SERVER span, its receive
    of the request."""
    return f"(starts_with({t}name, '{LLMD_SIDECAR_SERVER}') AND {t}kind = 'SERVER')"


EVENTS_READ: tuple[str, ...] = ()
"""The llm-d components write no span events."""


def _in(names: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{n}'" for n in names) + ")"


def _ancestry(spans: str, of: str) -> str:
    """SELECT (trace_id, span_id, gateway_id, leg): for each span of `of` (columns trace_id, span_id,
    parent_span_id), its nearest `gateway.request` ancestor within MAX_DEPTH and the leg it is on (`prefill`,
    `decode`, or `only` under neither); spans with no gateway above them are left out."""
    hops = [f"a{i}" for i in range(1, MAX_DEPTH + 1)]
    joins = "\n".join(
        f"LEFT JOIN up {h} ON {h}.trace_id = x.trace_id AND {h}.span_id = {prev}.parent_span_id"
        for h, prev in zip(hops, ["x", *hops])
    )
    gateway = "CASE " + " ".join(f"WHEN {h}.name = '{LLMD_GATEWAY}' THEN {h}.span_id" for h in hops) + " END"
    # the leg: the nearest prefill / decode span below the gateway
    leg = (
        "CASE "
        + " ".join(
            f"WHEN {h}.name = '{LLMD_GATEWAY}' THEN 'only' "
            f"WHEN {h}.name IN {_in(LLMD_PREFILL)} THEN 'prefill' WHEN {h}.name IN {_in(LLMD_DECODE)} THEN 'decode'"
            for h in hops
        )
        + " END"
    )
    return f"""
WITH up AS (SELECT trace_id, span_id, parent_span_id, name FROM {spans}
            WHERE source = 'llmd' OR source = 'client' OR name = 'llm_request'),
x AS ({of})
SELECT * FROM (
  SELECT x.trace_id, x.span_id, {gateway} AS gateway_id, {leg} AS leg
  FROM x
  {joins}) y
WHERE gateway_id IS NOT NULL"""


def legs(spans: str) -> str:
    """SELECT (trace_id, span_id): the `llm_request` spans that are legs of an llm-d request (the vLLM adapter
    gives them no rows of their own)."""
    of = f"SELECT trace_id, span_id, parent_span_id FROM {spans} WHERE name = '{vllm.VLLM_ROOT}'"
    return f"SELECT trace_id, span_id FROM ({_ancestry(spans, of)}) l"


def _legs(spans: str) -> str:
    """SELECT: per llm-d request (trace_id, gateway_id) and leg (`prefill`, `decode`, `only`), the vLLM row of the
    leg (the latest to arrive: a prefill retried after a 5xx leaves its failed attempts before it)."""
    of = f"SELECT trace_id, span_id, parent_span_id FROM {spans} WHERE name = '{vllm.VLLM_ROOT}'"
    cols = ", ".join(f"v.{c}" for c in SERVER_COLUMNS)
    return f"""
SELECT * FROM (
  SELECT a.gateway_id, a.leg, {cols},
    row_number() OVER (PARTITION BY v.trace_id, a.gateway_id, a.leg ORDER BY v.arrival_ns DESC) AS k
  FROM ({_ancestry(spans, of)}) a
  JOIN ({vllm.span_rows(spans)}) v ON v.trace_id = a.trace_id AND v.server_span_id = a.span_id) z
WHERE k = 1"""


def _hops(spans: str) -> str:
    """SELECT: per llm-d request, the sidecar's receive (ns) and whether the sidecar sent a prefill leg."""
    of = f"""SELECT trace_id, span_id, parent_span_id FROM {spans}
  WHERE source = 'llmd' AND (name IN {_in(LEG_NAMES)} OR {_sidecar_server()})"""
    return f"""
SELECT a.trace_id, a.gateway_id,
  min(s.start_ns) FILTER (WHERE {_sidecar_server("s.")}) AS sidecar_ns,
  count(*) FILTER (WHERE s.name IN {_in(LLMD_PREFILL)}) > 0 AS pd
FROM ({_ancestry(spans, of)}) a JOIN {spans} s ON s.trace_id = a.trace_id AND s.span_id = a.span_id
GROUP BY a.trace_id, a.gateway_id"""


def server_rows(spans: str) -> str:
    """SELECT: one server row per llm-d request (`gateway.request` span) in `spans`."""
    pd = "coalesce(h.pd, false)"
    serial = "p.first_token_ns <= d.arrival_ns"  # NULL when a leg is missing: no sum
    summed = {c: f"CASE WHEN {pd} THEN CASE WHEN {serial} THEN p.{c} + d.{c} END ELSE d.{c} END" for c in PD_SUMS}
    hop = "coalesce(h.sidecar_ns, least(p.arrival_ns, d.arrival_ns), d.arrival_ns, p.arrival_ns)"
    rows = select_list(
        trace_id="g.trace_id",
        server_span_id="g.span_id",
        parent_span_id="g.parent_span_id",
        source="'llmd'",
        request_id="coalesce(d.request_id, p.request_id, g.span_id)",
        service_name="g.service_name",
        model="coalesce(d.model, p.model)",
        tier="coalesce(d.tier, p.tier, 'default')",
        tenant="coalesce(d.tenant, p.tenant)",
        outcome="""CASE WHEN g.status_code = 'ERROR' THEN 'error' ELSE coalesce(d.outcome, 'ok') END""",
        arrival_ns="g.start_ns",
        first_token_ns="d.first_token_ns",
        # the queue's instants are a leg's, not the request's (its frontend does not start at the gateway's arrival)
        last_token_ns="d.last_token_ns",
        end_ns="g.end_ns",
        input_tokens="coalesce(d.input_tokens, p.input_tokens)",
        cached_tokens=f"CASE WHEN {pd} THEN p.cached_tokens ELSE d.cached_tokens END",
        output_tokens="d.output_tokens",
        gateway_ms=f"({hop} - g.start_ns) / 1e6",
        kv_handoff_ms=f"CASE WHEN {pd} AND {serial} THEN (d.arrival_ns - p.first_token_ns) / 1e6 END",
        decode_ms="d.decode_ms",
        postprocess_ms="d.postprocess_ms",
        ttft_ms="(d.first_token_ns - g.start_ns) / 1e6",
        e2e_ms="(g.end_ns - g.start_ns) / 1e6",
        itl_ms="d.itl_ms",
        **summed,
    )
    return f"""
WITH g AS (SELECT trace_id, span_id, parent_span_id, start_ns, end_ns, service_name, status_code FROM {spans}
           WHERE name = '{LLMD_GATEWAY}'),
l AS ({_legs(spans)}),
h AS ({_hops(spans)})
SELECT {rows}
FROM g
LEFT JOIN h ON h.trace_id = g.trace_id AND h.gateway_id = g.span_id
LEFT JOIN (SELECT * FROM l WHERE leg = 'prefill') p ON p.trace_id = g.trace_id AND p.gateway_id = g.span_id
LEFT JOIN (SELECT * FROM l WHERE leg <> 'prefill') d ON d.trace_id = g.trace_id AND d.gateway_id = g.span_id"""


def legs_without_server_span(spans: str) -> str:
    """SELECT (trace_id, span_id, name): the sidecar's HTTP client spans of llm-d requests with no `llm_request`
    under them (a leg whose vLLM span lost the trace context, or a vLLM that does not trace)."""
    of = f"""SELECT trace_id, span_id, parent_span_id FROM {spans} WHERE {HTTP_CLIENT_SQL}
  AND parent_span_id IN (SELECT span_id FROM {spans} WHERE source = 'llmd' AND name IN {_in(SIDECAR_LEGS)})"""
    return f"""
SELECT a.trace_id, a.span_id FROM ({_ancestry(spans, of)}) a
LEFT JOIN (SELECT trace_id, parent_span_id FROM {spans} WHERE name = '{vllm.VLLM_ROOT}') v
  ON v.trace_id = a.trace_id AND v.parent_span_id = a.span_id
WHERE v.parent_span_id IS NULL"""
