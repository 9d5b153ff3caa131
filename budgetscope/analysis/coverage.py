"""What the archive could read: the spans no adapter claimed, the requests that were misread, the span events no
adapter reads, and which requests have server and client spans.

A span is *unclaimed* when no adapter reads its name (`spans.source` = 'other', decided at ingest by
`budgetscope/derive/classify.py`) and its trace produced no request. Spans of another kind in a request's
trace (an HTTP framework's own span beside `llm.request`) are context, not lost data, so they do not count;
`engine.step` spans are claimed (the `engine_steps` view reads them) though they belong to no request.

A request is *misread* when its row breaks an invariant of budgetscope/derive/invariants.py (`requests.violations`),
and carries *unread events* when a span an adapter claimed in its trace has an event its adapter does not read
(`requests.unread_events`, derive/unread_events.py): both are counted here per format (`source`) and named, as the
unclaimed spans are.
"""

from __future__ import annotations

import re
import time

from budgetscope.analysis.selection import Selection
from budgetscope.derive import llmd
from budgetscope.derive.classify import UNCLAIMED as UNCLAIMED_SOURCE
from budgetscope.schema import RECEIVED_POSITION

LLMD_SOURCE = "llmd"
TOP_UNCLAIMED = 5
"""How many (span name, service) pairs a summary names; the total always counts them all."""


def _window(since_ns: int | None, until_ns: int | None) -> tuple[list[str], list[int]]:
    """Span start-time clauses for an optional window (ns since the epoch)."""
    clauses, params = [], []
    if since_ns is not None:
        clauses.append("s.start_ns >= ?")
        params.append(since_ns)
    if until_ns is not None:
        clauses.append("s.start_ns < ?")
        params.append(until_ns)
    return clauses, params


EXPORT_DELAY_S = 5.0
"""How often an exporter sends its spans: the OpenTelemetry SDK's batch span processor's default schedule delay
(`OTEL_BSP_SCHEDULE_DELAY`, 5000 ms), which vLLM, SGLang and TGI keep."""
SETTLE_S = 10.0
"""How long the spans of one request take to all land in an archive that is being written: the exporters send
every EXPORT_DELAY_S, so a request's server and client spans reach the collector within about that much of each
other, plus a commit (about a second)."""

CLIENT_ONLY = "source = 'client'"
"""A request with the client's spans only (derive/client.py's row: no server span joined it)."""
WITHOUT_CLIENT = "server_span_id IS NOT NULL AND NOT has_client_span"
"""A request with the server's spans only."""
LANDED_SINCE = (
    "SELECT DISTINCT s.trace_id FROM spans s JOIN ingest_batches b ON b.batch_id = s.batch_id "
    f"WHERE b.received_ns >= ? AND b.position LIKE '{RECEIVED_POSITION.format('%', '%')}'"
)
"""The traces that got spans sent live (a collector's receiver took them) in a batch the archive received at or after
a time (`ingest_batches.received_ns`: the writer's clock). A file's batches are left out: a file holds what it
will ever hold. A sharded root's shards number their batches each on its own: there a span of another shard's
batch of the same number counts too (more requests said to be in flight, never fewer)."""

KV_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
"""A server's KV-use gauges in `server_metrics` (vLLM's, its older name, SGLang's): queue_wait reads them."""


ROW_FLAGS = ("violations", "unread_events")
"""The `requests` columns that flag a row: the invariants it breaks, the span events of its trace no adapter reads."""


def contents(con) -> dict[str, bool]:
    """Which of the tables a report may join hold any row, in one statement: `gpu_samples`, `engine_steps`,
    `kv_gauges` (server_metrics rows of KV_GAUGES), `unclaimed` (spans of source UNCLAIMED_SOURCE), `llmd` (llm-d
    requests), and whether a request breaks an invariant (`violations`) or carries unread events (`unread_events`).
    A report skips the joins and counts of what holds nothing: their figures are then known without them (no
    samples, no steps).

    A connection with a `memo` dict (a Spark archive's: its segments are fixed when it opens) keeps the answer
    for its later reports."""
    memo = getattr(con, "memo", None)
    if memo is not None and "contents" in memo:
        return memo["contents"]
    names = ", ".join(f"'{m}'" for m in KV_GAUGES)
    probes = {
        "gpu_samples": "SELECT 1 FROM gpu_samples",
        "engine_steps": "SELECT 1 FROM engine_steps",
        "kv_gauges": f"SELECT 1 FROM server_metrics WHERE metric IN ({names})",
        "unclaimed": f"SELECT 1 FROM spans WHERE source = '{UNCLAIMED_SOURCE}'",
        "llmd": f"SELECT 1 FROM requests WHERE source = '{LLMD_SOURCE}'",
        **{k: f"SELECT 1 FROM requests WHERE len({k}) > 0" for k in ROW_FLAGS},
    }
    try:
        row = con.execute(
            "SELECT "
            + ", ".join(f"(SELECT count(*) FROM ({q} LIMIT 1) AS p{i})" for i, q in enumerate(probes.values()))
        ).fetchone()
        found = {k: bool(v) for k, v in zip(probes, row)}
    except Exception:  # noqa: BLE001 - DuckDB's or Spark's: a table an older single-file archive lacks
        found = {k: _holds_rows(con, q) for k, q in probes.items()}
    if memo is not None:
        memo["contents"] = found
    return found


def _holds_rows(con, query: str) -> bool:
    """Whether `query` gives a row; False when its table is missing."""
    try:
        return bool(con.execute(f"SELECT count(*) FROM ({query} LIMIT 1) AS p").fetchone()[0])
    except Exception:  # noqa: BLE001 - DuckDB's or Spark's error for a missing table
        return False


def unclaimed_spans(
    con,
    since_ns: int | None = None,
    until_ns: int | None = None,
    top: int = TOP_UNCLAIMED,
    exact: bool = False,
    present: dict[str, bool] | None = None,
) -> dict:
    """The spans no adapter claimed (those starting in [since_ns, until_ns) when given), by span name and
    service, most first: {"total": spans, "groups": (name, service) pairs, "top": [{"name", "service_name",
    "spans"}] (at most `top`; ids in names replaced by `<id>`)}; with `exact`, also "by_name": {exact span
    name: spans} (one key a distinct name: for tests and small archives). `present` (`contents`) saves the join
    when no span is unclaimed."""
    if present is not None and not present["unclaimed"]:
        out = {"total": 0, "groups": 0, "top": []}
        return {**out, "by_name": {}} if exact else out
    clauses, params = _window(since_ns, until_ns)
    where = " AND ".join(
        [
            f"s.source = '{UNCLAIMED_SOURCE}'",
            *clauses,
            "NOT EXISTS (SELECT 1 FROM requests r WHERE r.trace_id = s.trace_id)",
        ]
    )
    found = con.execute(
        f"""SELECT s.name, s.service_name, count(*) FROM spans s WHERE {where}
        GROUP BY s.name, s.service_name""",
        params,
    ).fetchall()
    groups: dict[tuple, int] = {}
    by_name: dict[str, int] = {}
    for name, svc, n in found:
        groups[(id_free(name), svc)] = groups.get((id_free(name), svc), 0) + n
        by_name[name] = by_name.get(name, 0) + n
    rows = sorted(groups.items(), key=lambda kv: (-kv[1], str(kv[0][0]), str(kv[0][1])))
    out = {
        "total": sum(by_name.values()),
        "groups": len(rows),
        "top": [{"name": name, "service_name": svc, "spans": n} for (name, svc), n in rows[:top]],
    }
    return {**out, "by_name": by_name} if exact else out


_ID = re.compile(r"\b[0-9a-fA-F-]*[0-9][0-9a-fA-F-]*\b")
"""A word of hex digits (and dashes) with at least one digit: a request id or a counter inside a span name."""


def flagged(
    con, column: str, where: str = "", params: list | None = None, top: int = TOP_UNCLAIMED, present=None
) -> dict:
    """The requests (those of `where`, a WHERE clause over `requests`) whose `column` (one of ROW_FLAGS) names
    anything, per format and name, most first: {"total": requests, "groups": (source, name) pairs, "top":
    [{"source", "name", "requests"}] (at most `top`), "by_source": {source: requests}}. `present` (`contents`)
    saves the scan when no row is flagged (or the archive's rows predate the column)."""
    empty = {"total": 0, "groups": 0, "top": [], "by_source": {}}
    if present is not None and not present.get(column):
        return empty
    cond = f"len({column}) > 0"
    where = f"{where} AND {cond}" if where else f"WHERE {cond}"
    # one scan: '*' stands for the row itself, so each source's flagged requests come with its names
    found = con.execute(
        f"""SELECT source, n, count(*) FROM (
          SELECT source, unnest(list_concat(['*'], {column})) AS n FROM requests {where}) x GROUP BY 1, 2""",
        params or [],
    ).fetchall()
    by_source = {src: k for src, n, k in found if n == "*"}
    groups = sorted(((src, n, k) for src, n, k in found if n != "*"), key=lambda g: (-g[2], str(g[0]), g[1]))
    return {
        "total": sum(by_source.values()),
        "groups": len(groups),
        "top": [{"source": src, "name": n, "requests": k} for src, n, k in groups[:top]],
        "by_source": dict(sorted(by_source.items(), key=lambda kv: (-kv[1], str(kv[0])))),
    }


FLAG_WORDS = {
    "violations": 'misread (breaking an invariant of their format, docs/metrics.md "Invariants")',
    "unread_events": "with span events no adapter reads",
}


def flagged_line(column: str, f: dict) -> str | None:
    """One line naming the flagged requests of `flagged`, or None when there is none."""
    if not f["total"]:
        return None
    top = ", ".join(f"{t['source']} {t['name']!r} ({t['requests']:,})" for t in f["top"])
    more = f" and {f['groups'] - len(f['top'])} more" if f["groups"] > len(f["top"]) else ""
    return f"{f['total']:,} request{'' if f['total'] == 1 else 's'} {FLAG_WORDS[column]}: {top}{more}"


def unclaimed_in(archive) -> dict:
    """`unclaimed_spans` of the archive at `archive` (a path), as last committed; raises ArchiveError when it
    cannot be read."""
    # imported on use: duckdb 153 ms, protobuf 57 ms, orjson 28 ms to import
    from budgetscope.opener import Archive

    with Archive(archive, read_only=True, create=False) as a:
        return unclaimed_spans(a.con)


def id_free(name: str | None) -> str | None:
    """A span name with the ids in it replaced by `<id>`, so that SGLang's `" Req 1f3a9c2e"` roots group as one
    name (`" Req <id>"`), its leading space kept."""
    return None if name is None else _ID.sub("<id>", name)


def span_count(con, since_ns: int | None = None, until_ns: int | None = None) -> int:
    """The spans in the archive (those starting in [since_ns, until_ns) when given)."""
    clauses, params = _window(since_ns, until_ns)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return con.execute(f"SELECT count(*) FROM spans s {where}", params).fetchone()[0]


def unclaimed_line(u: dict) -> str | None:
    """One line naming the top unclaimed spans and the total, or None when every span was claimed."""
    if not u["total"]:
        return None
    top = ", ".join(f"{t['name']!r} of {t['service_name'] or 'no service'} ({t['spans']:,})" for t in u["top"])
    more = f" and {u['groups'] - len(u['top'])} more" if u["groups"] > len(u["top"]) else ""
    return f"{u['total']:,} spans no adapter claimed: {top}{more}"


def nothing_derived_warning(spans: int, requests: int, u: dict) -> str | None:
    """The one-line warning when spans arrived but no request was derived from them, else None. `u`: the
    unclaimed spans (`unclaimed_spans`; {"total": None} where they are not known). Spans an adapter claimed that gave
    no request are a trace whose root has not arrived (vLLM journey tracing's `llm_core` without its
    `llm_request`): their format is read, and the warning says so rather than that nothing reads it."""
    if not spans or requests:
        return None
    if u.get("total") is None:  # not read (a single-file archive the collector holds, or an error reading it)
        return f"warning: {spans:,} spans arrived but no request was derived"
    unclaimed = min(u["total"], spans)
    what = f"; {unclaimed_line(u)}" if u["total"] else ""
    if unclaimed == spans:
        return (
            f"warning: {spans:,} spans arrived but no request was derived: no adapter reads their format "
            f"(docs/sources.md lists the formats read){what}"
        )
    return (
        f"warning: {spans:,} spans arrived but no request was derived: {spans - unclaimed:,} of them an adapter "
        f"reads, but no request's root span arrived with them (partial traces: the rest may come later){what}"
    )


def orphan_legs(con, since_ns: int | None = None, until_ns: int | None = None) -> dict | None:
    """Where the window holds llm-d requests: the vLLM `llm_request` spans that started a trace of their own (no
    parent: the trace context was dropped between the routing sidecar and vLLM, or the call bypassed the gateway),
    by service, most first, and the sidecar's legs (its HTTP client spans in llm-d traces) with no `llm_request`
    under them. Neither is joined to a request by a guess: the roots are vLLM rows of their own, and the llm-d
    requests' stages that need the missing leg are NULL (derive/llmd.py). None without llm-d requests."""
    # the window's bounds are ints: written into the SQL, which repeats the spans' relation
    bounds = []
    if since_ns is not None:
        bounds.append(f"start_ns >= {int(since_ns)}")
    if until_ns is not None:
        bounds.append(f"start_ns < {int(until_ns)}")
    span_window = " AND ".join(bounds)
    row_window = span_window.replace("start_ns", "arrival_ns") or "true"
    (n,) = con.execute(f"SELECT count(*) FROM requests WHERE source = '{LLMD_SOURCE}' AND {row_window}").fetchone()
    if not n:
        return None
    spans = f"(SELECT * FROM spans WHERE {span_window or 'true'})"
    roots = con.execute(
        f"""SELECT service_name, count(*) FROM {spans} s WHERE name = 'llm_request' AND parent_span_id IS NULL
        GROUP BY service_name"""
    ).fetchall()
    (legs,) = con.execute(f"SELECT count(*) FROM ({llmd.legs_without_server_span(spans)}) x").fetchone()
    by_service = sorted(roots, key=lambda r: (-r[1], str(r[0])))
    return {
        "llmd_requests": n,
        "llm_request_roots": sum(k for _, k in roots),
        "by_service": [{"service_name": svc, "spans": k} for svc, k in by_service],
        "legs_without_llm_request": legs,
    }


def orphan_line(o: dict | None) -> str | None:
    """One line naming the llm-d legs that lost their trace context, or None when there are none."""
    if not o or not (o["llm_request_roots"] or o["legs_without_llm_request"]):
        return None
    parts = []
    if o["llm_request_roots"]:
        svc = ", ".join(f"{t['service_name'] or 'no service'} ({t['spans']:,})" for t in o["by_service"])
        parts.append(
            f"{o['llm_request_roots']:,} llm_request spans started a trace of their own ({svc}): their trace context "
            "was dropped before vLLM, so they are requests of their own, not joined to their llm-d requests"
        )
    if o["legs_without_llm_request"]:
        parts.append(
            f"{o['legs_without_llm_request']:,} routing-sidecar legs have no llm_request in their trace "
            "(those llm-d requests' stages of that leg are unknown)"
        )
    return "llm-d: " + "; ".join(parts)


def coverage(con, where: str = "", params: list | None = None) -> dict:
    """Of the requests in `where` (a WHERE clause over `requests`): how many have a server span (the server
    sent its own timeline), a client span, and both."""
    row = con.execute(
        f"""SELECT count(*), count_if(server_span_id IS NOT NULL),
        count_if(has_client_span), count_if(server_span_id IS NOT NULL AND has_client_span)
        FROM requests {where}""",
        params or [],
    ).fetchone()
    n, server, client, both = (v or 0 for v in row)  # count_if of no rows is NULL
    return {"requests": n, "with_server_spans": server, "with_client_spans": client, "with_both": both}


def in_flight(
    con, since_ns: int | None, until_ns: int | None, last_commit_ns: int | None, now_ns: int | None = None
) -> dict | None:
    """Of the requests that arrived in [since_ns, until_ns), those that may still lack spans: in an archive
    committed less than SETTLE_S before `now_ns` (default now: being written), the requests with only one side's
    spans that are at its edge, in a window that has both sides' (a server's and a client's). None when there are
    none (and no scan when the archive is not being written). {"requests", "client_only", "without_client_span",
    "last_commit_age_s", "settle_s", "ended_since_ns"}.

    At its edge: the request ended within SETTLE_S of that commit (`ended_since_ns` on) by its spans' clock, or
    spans of its trace came in a batch the archive received since then (`LANDED_SINCE`: the writer's clock, as
    the commit's is). The first alone compares the sender's clock with the writer's: a client whose clock is
    behind by more than SETTLE_S had its newest one-sided requests read as whole."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    settle_s = SETTLE_S
    if last_commit_ns is None or now_ns - last_commit_ns >= settle_s * 1e9:
        return None
    edge = last_commit_ns - int(settle_s * 1e9)
    whole = Selection({}, since_ns, until_ns)
    # joined, not tested by IN inside count_if (Spark takes subqueries in filters only)
    at_edge = "(r.end_ns >= ? OR l.trace_id IS NOT NULL)"
    row = con.execute(
        f"""SELECT count_if(r.bs_server), count_if(r.bs_client), count_if({at_edge} AND r.bs_only),
          count_if({at_edge} AND r.bs_without)
        FROM (SELECT trace_id, end_ns, server_span_id IS NOT NULL AS bs_server, has_client_span AS bs_client,
                {CLIENT_ONLY} AS bs_only, {WITHOUT_CLIENT} AS bs_without FROM requests {whole.where()}) r
        LEFT JOIN ({LANDED_SINCE}) l ON l.trace_id = r.trace_id""",
        [edge, edge, *whole.params, edge],
    ).fetchone()
    servers, clients, only, without = (v or 0 for v in row)  # count_if of no rows is NULL
    if not (servers and clients and only + without):
        return None  # one side sends no spans at all: what the other sent is all there will be
    return {
        "requests": only + without,
        "client_only": only,
        "without_client_span": without,
        "last_commit_age_s": round(max(0, now_ns - last_commit_ns) / 1e9, 1),
        "settle_s": settle_s,
        "ended_since_ns": edge,
    }


def _at_edge(edge: int) -> tuple[str, list]:
    """(SQL over `requests`, its parameters): at the edge `edge` (`in_flight`)."""
    return f"(end_ns >= ? OR trace_id IN ({LANDED_SINCE}))", [edge, edge]


def in_flight_rows(f: dict | None) -> tuple[str, list] | None:
    """(SQL over `requests`, its parameters): true for `in_flight`'s requests (None: there are none)."""
    if not f:
        return None
    sides = [sql for sql, n in ((CLIENT_ONLY, f["client_only"]), (WITHOUT_CLIENT, f["without_client_span"])) if n]
    at_edge, params = _at_edge(f["ended_since_ns"])
    return f"{at_edge} AND ({' OR '.join(sides)})", params


def in_flight_warning(f: dict | None) -> str | None:
    """The one-line warning for `in_flight`'s requests, else None."""
    if not f:
        return None
    sides = [
        f"{n:,} {what}"
        for n, what in ((f["client_only"], "client-only"), (f["without_client_span"], "without a client span"))
        if n
    ]
    return (
        f"warning: the archive is being written (last commit {f['last_commit_age_s']:g} s ago): {f['requests']:,} "
        f"request{'s' if f['requests'] != 1 else ''} of the window with one side's spans only ended, or came, within "
        f"{f['settle_s']:g} s of it ({', '.join(sides)}); the other side's may not have landed yet (exporters batch "
        f"spans for {EXPORT_DELAY_S:g} s), so their time may read as unaccounted or without network: run the report "
        f"again in {f['settle_s']:g} s"
    )


def coverage_line(c: dict) -> str:
    """The report's coverage in one line."""
    return (
        f"coverage: {c['requests']:,} requests; {c['with_server_spans']:,} with server spans, "
        f"{c['with_client_spans']:,} with client spans, {c['with_both']:,} with both"
    )


__all__ = [
    "contents",
    "flagged",
    "flagged_line",
    "ROW_FLAGS",
    "KV_GAUGES",
    "unclaimed_spans",
    "unclaimed_line",
    "nothing_derived_warning",
    "coverage",
    "coverage_line",
    "in_flight",
    "in_flight_warning",
    "in_flight_rows",
    "SETTLE_S",
    "orphan_legs",
    "orphan_line",
    "span_count",
]
