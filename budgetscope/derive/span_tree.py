"""SQL over the span tree: which spans belong to which request, found by parent links rather than by trace.

A trace may hold many requests (an application span that calls a server several times passes one traceparent),
so an adapter that gathers a request's stage spans by `trace_id` alone would mix them.
"""

from __future__ import annotations


def descendants(
    roots: str, spans: str, columns: tuple[str, ...] = (), from_root: tuple[tuple[str, str], ...] = ()
) -> str:
    """Recursive CTE body `(request_id, trace_id, span_id, *columns, *names)`: every span of `spans` under each
    span of `roots` (itself included), `request_id` being that root's span id, with the span's own `columns` (of
    both relations) carried along, so that a reader needs no join back to `spans` (on TGI's 73 spans a request
    that join was a third of the derivation). `from_root`: (a column of `roots`, its name in the CTE) pairs, the
    request's own values carried to every span under it, so that a reader needs no join back to `roots` either.
    Each step's hash table is built from the spans the last step found, not from `spans` (the derivation runs
    without DuckDB's join-side swap: `requests.PLANNER`). Use as
    `WITH RECURSIVE d(request_id, trace_id, span_id, *columns, *names) AS (<this>)`."""
    own = "".join(f", {c}" for c in columns) + "".join(f", {c}" for c, _ in from_root)
    child = "".join(f", c.{c}" for c in columns) + "".join(f", d.{name}" for _, name in from_root)
    return f"""SELECT span_id AS request_id, trace_id, span_id{own} FROM {roots}
  UNION ALL
  SELECT d.request_id, c.trace_id, c.span_id{child}
  FROM {spans} c JOIN d ON c.trace_id = d.trace_id AND c.parent_span_id = d.span_id"""
