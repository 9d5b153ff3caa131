"""Span events no adapter reads: found at derivation, kept on the request rows of their trace (`unread_events`).

Ingest keeps a span's events under `budgetscope.events` (schema.EVENTS_KEY). Each adapter module declares the event
names it reads, or knowingly passes over, as `EVENTS_READ` (names, matched exactly; one holding `%` is a SQL LIKE
pattern); derive/requests.py hands them here by `spans.source`. An event on a span an adapter claimed (`source` not
`other`) whose name its source's adapter does not declare is *unread*: a server that starts stamping a new instant,
or a format read from its span bounds only, says so in `report` (budgetscope.analysis.coverage) instead of being
silently misread.

Kept per trace: every request row of the trace lists the trace's unread names (a trace usually holds one request;
an application trace calling a server several times lists them on each).
"""

from __future__ import annotations

from budgetscope.derive.classify import UNCLAIMED, mentions
from budgetscope.schema import EVENTS_KEY

NAMES = '{"' + EVENTS_KEY + '":[{"name":"VARCHAR"}]}'
"""The events' names, as json_transform reads them."""


def _read(read: dict[str, tuple[str, ...]]) -> str:
    """SQL over (source, n): the adapter of the span's source reads event `n`. A name without `%` is matched
    exactly (one IN list a source: `_` in a name is a character, not LIKE's wildcard), one with `%` as a LIKE
    pattern."""
    cases = []
    for source, patterns in read.items():
        names = [p for p in patterns if "%" not in p]
        tests = ["n IN (" + ", ".join(f"'{p}'" for p in names) + ")"] if names else []
        tests += [f"n LIKE '{p}'" for p in patterns if "%" in p]
        if tests:
            cases.append(f"(source = '{source}' AND ({' OR '.join(tests)}))")
    return " OR ".join(cases) or "false"


def unread_sql(spans: str, read: dict[str, tuple[str, ...]], parsed: list[tuple[str, str, str]] = ()) -> str:
    """SELECT (trace_id, names): per trace of `spans` with an unread event, the distinct unread names, sorted.
    `read`: source → the event names its adapter reads (`_read`). `parsed`: for each adapter that parsed
    events already, (a relation of them, a row a span with columns trace_id and source; the SQL condition over a
    span that selects the spans whose events it holds, every one of them; the expression over its row of the
    span's events, a list of structures with a `name`): those spans' events are taken from it instead of being
    parsed again (vLLM's and Triton's: requests.PARSED_EVENTS)."""
    mine = "".join(f" AND NOT ({cond})" for _, cond, _ in parsed)
    theirs = "".join(
        f"\n    UNION ALL SELECT trace_id, source, e.name FROM (SELECT trace_id, source, unnest({events}) AS e "
        f"FROM {rel} WHERE source <> '{UNCLAIMED}') p"
        for rel, _, events in parsed
    )
    # only spans whose attributes hold events are parsed: a substring test is far cheaper than the JSON parse; the
    # spans an adapter parsed already are left out before it (their tests read a name or a key, not the whole text)
    return f"""SELECT trace_id, list(n ORDER BY n) AS names FROM (
  SELECT DISTINCT trace_id, n FROM (
    SELECT trace_id, source, e.name AS n FROM (
      SELECT trace_id, source, unnest(json_transform(attributes, '{NAMES}')."{EVENTS_KEY}") AS e
      FROM {spans} WHERE source <> '{UNCLAIMED}'{mine} AND {mentions(EVENTS_KEY)}) x{theirs}) y
  WHERE n IS NOT NULL AND NOT ({_read(read)})) z
GROUP BY trace_id"""
