"""GenAI client spans: the application's own span of an LLM call, as the client view of the server's request.

An OpenTelemetry GenAI client instrumentation (semantic conventions: kind CLIENT, `gen_ai.operation.name`) opens
one span per call of the SDK, around everything the application waited for: openai-v2
(open-telemetry/opentelemetry-python-contrib 466ae4c, `instrumentation-genai/opentelemetry-instrumentation-openai-v2`:
`chat {model}`, ended after the response is parsed or, streamed, when the application has read the stream to its
end), OpenLLMetry (traceloop/openllmetry 93429cf, `opentelemetry-instrumentation-openai`: `openai.chat`, ended the
same way). The server span is its child (OpenLLMetry injects the span's own `traceparent`) or its grandchild, under
the HTTP client span the SDK's transport made (httpx's `POST`, which ends at the response headers).

Which span is a request's client span (derive/requests.py joins by it):
  1. budgetscope's own client span, or an imported tool's record, when one is the server span's parent;
  2. else the GenAI span that is the server span's parent, or the parent of the HTTP client span that is, when
     that GenAI span holds no other HTTP client span: it timed the whole call as the application saw it, where the
     HTTP span of a streamed response timed only the headers. A GenAI span over two or more HTTP spans is an SDK
     that retried: it covers the failed attempts and the back-off between them, which are no network time, so
  3. else the HTTP client span that is the server span's parent.
A first-token time only where the span carries one: OpenLLMetry's first `gen_ai.content.completion.chunk` event
(one per chunk the application read; definition `first_chunk`); openai-v2 records none in either semantic
conventions mode, so its client TTFT stays NULL.
"""

from __future__ import annotations

from budgetscope.derive.classify import GENAI_CLIENT_SQL, HTTP_CLIENT_SQL, mentions
from budgetscope.schema import EVENTS_KEY

CHUNK_EVENT = "gen_ai.content.completion.chunk"
"""OpenLLMetry's span event for each streamed chunk the application read (semconv_ai
`SpanAttributes.GEN_AI_CONTENT_COMPLETION_CHUNK`)."""
FIRST_CHUNK = "first_chunk"
"""`client_first_token_definition` of a GenAI span's first chunk event: the first chunk of any kind the SDK handed
the application (vLLM sends its first chunk, the role, with the first token)."""
EVENTS_READ = (CHUNK_EVENT,)
"""The span events read on client spans."""

_EVENTS = '{"' + EVENTS_KEY + '":[{"name":"VARCHAR","time_unix_nano":"BIGINT"}]}'


def first_chunks(spans: str) -> str:
    """SELECT (trace_id, span_id, first_chunk_ns): each GenAI client span of `spans` with a chunk event, and its
    first one (ns)."""
    # only spans whose attributes hold events are parsed
    return f"""SELECT trace_id, span_id, min(e.time_unix_nano) AS first_chunk_ns FROM (
  SELECT trace_id, span_id, unnest(json_transform(attributes, '{_EVENTS}')."{EVENTS_KEY}") AS e
  FROM {spans} WHERE {GENAI_CLIENT_SQL} AND {mentions(EVENTS_KEY)}) x
WHERE e.name = '{CHUNK_EVENT}' GROUP BY trace_id, span_id"""


def over_http(spans: str) -> str:
    """SELECT (trace_id, http_id, genai_id, http_status): each HTTP client span whose parent is a GenAI client span
    that holds no other HTTP client span, with that GenAI span and the HTTP span's status code: the server span
    under `http_id` takes `genai_id` as its client span."""
    status = " ".join(
        f"CAST(attributes->>'{k}' AS INTEGER)," for k in ("http.response.status_code", "http.status_code")
    ).rstrip(",")
    return f"""SELECT h.trace_id, h.span_id AS http_id, g.span_id AS genai_id, h.http_status
FROM (SELECT trace_id, span_id, parent_span_id, coalesce({status}) AS http_status FROM {spans}
      WHERE {HTTP_CLIENT_SQL}) h
JOIN (SELECT trace_id, span_id FROM {spans} WHERE {GENAI_CLIENT_SQL}) g
  ON g.trace_id = h.trace_id AND g.span_id = h.parent_span_id
JOIN (SELECT trace_id, parent_span_id, count(*) AS n FROM {spans} WHERE {HTTP_CLIENT_SQL}
      GROUP BY trace_id, parent_span_id) k
  ON k.trace_id = h.trace_id AND k.parent_span_id = h.parent_span_id
WHERE k.n = 1"""
