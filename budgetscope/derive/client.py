"""Client-only adapter: a `llm.client.request` span whose server sent no span → a `requests` row.

Any OpenAI-compatible endpoint measured by `budgetscope load` (or any client following the span contract)
gives client TTFT, ITL and E2E; the server's stages are NULL (unknown), and so is network, which cannot be told
apart from server time without a server clock. `requests.py` puts the whole client figure in `unaccounted_ms`
(and `ttft_unaccounted_ms`), so an attribution over such rows says "unaccounted", never a guessed stage.

One server figure is used when present: `openai-processing-ms` (OpenAI's header, also sent by
llama-cpp-python's server: its route handler's time, integer ms) on a NON-streaming response is the server's
E2E, so `network_ms` = client E2E − it. On a streaming response it only times the handler's setup and is ignored.

`arrival_ns` / `end_ns` of these rows are the client's send / receive times (client clock): the server's are
unknown, and the timeline needs an anchor. `service_name` is the client span's (the tool: `aiperf`, `guidellm`,
`vllm-bench`, `load`'s `--service-name`), so a tool's rows can be picked out by it. Token counts come from the
span's `gen_ai.usage.*` attributes
(`cache_read.input_tokens` → `cached_tokens`, when the client was told it, e.g. GuideLLM's usage).
"""

from __future__ import annotations

from budgetscope.derive.classify import CLIENT_ROOT_SQL
from budgetscope.derive.server_row import select_list

EVENTS_READ: tuple[str, ...] = ()
"""Span events this adapter reads on a client span: none."""

FIRST_TOKEN_DEFINITION = "budgetscope.client.first_token_definition"
"""Client span attribute: what the client counted as the first token (the anchor of `client_ttft_ms`)."""
TOKEN_EVENT = "first_token_event"
"""The first stream event carrying a token, its text possibly empty (`load`; vLLM bench: the first chunk with
`choices`)."""
NONEMPTY_CHUNK = "first_nonempty_chunk"
"""The first stream chunk with non-empty text (AIPerf, GuideLLM)."""
FIRST_EVENT = "budgetscope.client.first_event_unix_nano"
"""Client span attribute: the first stream event of any kind, ns, where the tool's export has it (GuideLLM; AIPerf
with its raw export beside the records)."""
ID_ATTR = "budgetscope.client.request_id"
"""Client span attribute: the server's request id as the client recorded it (imports without trace context)."""

ATTRS = (
    '{"gen_ai.request.model":"VARCHAR","gen_ai.usage.input_tokens":"BIGINT","gen_ai.usage.output_tokens":"BIGINT",'
    '"gen_ai.usage.cache_read.input_tokens":"BIGINT","budgetscope.tier":"VARCHAR","budgetscope.tenant":"VARCHAR",'
    '"http.response.status_code":"INTEGER",'
    '"error.type":"VARCHAR","budgetscope.client.stream":"BOOLEAN",'
    '"http.response.header.openai-processing-ms":"VARCHAR[]"}'
)

OUTCOME_SQL = """CASE WHEN a."error.type" IS NULL AND coalesce(a."http.response.status_code", 200) < 400 THEN 'ok'
  WHEN a."error.type" = 'timeout' THEN 'timeout'
  WHEN a."error.type" = 'cancelled' THEN 'cancelled'
  WHEN a."http.response.status_code" IN (429, 503) THEN 'rejected'
  ELSE 'error' END"""
"""A client span's outcome: ok, timeout, cancelled, rejected (429/503), or error."""


def client_spans(spans: str, attrs: str = ATTRS) -> str:
    """The client spans of `spans`, with their attributes typed by `attrs` (a json_transform structure) as `a`."""
    return f"""SELECT trace_id, span_id, start_ns, end_ns, service_name, json_transform(attributes, '{attrs}') AS a
  FROM {spans} WHERE {CLIENT_ROOT_SQL}"""


def common(source: str) -> dict[str, str]:
    """Server-row expressions every client-span-based adapter shares (over a client span `c` with attrs `a`)."""
    return {
        "trace_id": "trace_id",
        "parent_span_id": "span_id",
        "source": f"'{source}'",
        "request_id": "span_id",
        "model": 'a."gen_ai.request.model"',
        "tier": """coalesce(a."budgetscope.tier", 'default')""",
        "tenant": 'a."budgetscope.tenant"',
        "outcome": OUTCOME_SQL,
        "arrival_ns": "start_ns",
        "end_ns": "end_ns",
        "input_tokens": 'a."gen_ai.usage.input_tokens"',
        "output_tokens": 'a."gen_ai.usage.output_tokens"',
        "cached_tokens": 'a."gen_ai.usage.cache_read.input_tokens"',
    }


def server_rows(spans: str) -> str:
    """SELECT producing one row per client span of `spans` (requests.py keeps those no other adapter claims)."""
    e2e = """CASE WHEN a."budgetscope.client.stream" IS FALSE
              THEN TRY_CAST(a."http.response.header.openai-processing-ms"[1] AS DOUBLE) END"""
    # no server name is known: the client's (the tool) tells whose rows these are
    cols = select_list(**common("client"), service_name="service_name", e2e_ms=e2e)
    return f"SELECT {cols} FROM ({client_spans(spans)})"
