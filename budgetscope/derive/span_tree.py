"""SQL over the span tree: which spans belong to which request, found by parent links rather than by trace.

A trace may hold many requests (an application span that calls a server several times passes one traceparent),
so an adapter that gathers a request's stage spans by `trace_id` alone would mix them.
"""

from __future__ import annotations


def descendants(roots: str, spans: str) -> str:
    """Recursive CTE body `(request_id, trace_id, span_id)`: every span of `spans` under each span of `roots`
    (itself included), `request_id` being that root's span id. Use as `WITH RECURSIVE d(request_id, trace_id,
    span_id) AS (<this>)`."""
    return f"""SELECT span_id AS request_id, trace_id, span_id FROM {roots}
  UNION ALL
  SELECT d.request_id, c.trace_id, c.span_id
  FROM d JOIN {spans} c ON c.trace_id = d.trace_id AND c.parent_span_id = d.span_id"""
