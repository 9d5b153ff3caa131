"""Deriving what landed: the `requests` rows of every trace in a working set's `pending_traces`.

A writer's working set (a DuckDB connection with the tables of budgetscope/schema.py) records, in the transaction
that lands spans, the traces they touched; `derive_pending` replaces those traces' `requests` rows, and empties
`pending_traces`, in one transaction, so a crash between a landing and its derivation loses nothing: the next
writer derives them.

The derivation reads the spans of the pending traces (its scope) several times, once an adapter. Spans land in
batches of rising ids and every landed span's trace is pending until derived, so the pending traces' spans are the
held spans past the newest batch that holds a span of another trace, plus the few older spans of pending traces
(a trace whose spans came in several exports, a trace read back): the first part is a range of `batch_id`, read in
place (the row groups before it are skipped by their statistics), and only the second is copied. Copying every
pending span, as this did before, cost 0.19-0.25 s for 100,000 journey spans, where finding them cost 0.01 s
(docs/benchmarks.md, 2026-11-29, fifth session).
"""

from __future__ import annotations

from budgetscope.derive.requests import planned, present_sources, requests_sql


def orphans_sql(scope: str) -> str:
    """SQL counting the stage spans in `scope` (spans of whole traces) whose parent is not there: a stage span's
    root shares its trace, so the scope holds it if it arrived."""
    return f"""
SELECT count(*) FROM {scope} s WHERE starts_with(s.name, 'stage.')
AND NOT EXISTS (SELECT 1 FROM {scope} r WHERE r.trace_id = s.trace_id AND r.span_id = s.parent_span_id)"""


def derive_pending(con, count_orphans: bool = True, track: bool = False) -> tuple[int, int]:
    """(Re)derive the `requests` rows of every trace whose spans changed; return (rows, orphan stage spans; 0
    without `count_orphans`). `track`: record the traces derived (`bs_derived`) and the rows they replace
    (`bs_superseded`), for a folder writer's next publish."""
    (pending,) = con.execute("SELECT count(*) FROM pending_traces").fetchall()[0]
    if not pending:
        return 0, 0
    (existing,) = con.execute("SELECT count(*) FROM requests").fetchall()[0]
    with planned(con):  # around the transaction: a statement that failed in it leaves it refusing a RESET
        return _derive(con, existing, count_orphans, track)


def _derive(con, existing: int, count_orphans: bool, track: bool) -> tuple[int, int]:
    scope = "spans"  # on a fresh archive the scope is all spans
    con.execute("BEGIN TRANSACTION")
    try:
        if track:
            con.execute(
                "INSERT INTO bs_superseded SELECT trace_id, arrival_ns FROM requests "
                "WHERE trace_id IN (SELECT trace_id FROM pending_traces)"
            )
            con.execute("INSERT INTO bs_derived SELECT trace_id FROM pending_traces")
        if existing:
            scope = _scope(con)
            con.execute("DELETE FROM requests WHERE trace_id IN (SELECT trace_id FROM pending_traces)")
        # by name: a file that gained columns later (duckdb_archive) may hold them in another order
        con.execute(f"INSERT INTO requests BY NAME {requests_sql(scope, present_sources(con, scope))}")
        (n,) = con.execute(
            "SELECT count(*) FROM requests WHERE trace_id IN (SELECT trace_id FROM pending_traces)"
        ).fetchall()[0]
        (orphans,) = con.execute(orphans_sql(scope)).fetchall()[0] if count_orphans else (0,)
        con.execute("DELETE FROM pending_traces")
        con.execute("DROP VIEW IF EXISTS bs_scope")
        con.execute("DROP TABLE IF EXISTS bs_scope_old")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    return n, orphans


def _scope(con) -> str:
    """The relation of the pending traces' spans (see above): `spans` itself when every span held is of a
    pending trace, else the view `bs_scope` (dropped with `bs_scope_old` by the caller)."""
    # the newest batch that holds a span of a trace not pending: every span past it is of a pending trace
    others, newest = con.execute(
        "SELECT count(*), max(s.batch_id) FROM spans s ANTI JOIN pending_traces p ON p.trace_id = s.trace_id"
    ).fetchall()[0]
    if not others:
        return "spans"
    tail = "batch_id IS NOT NULL" if newest is None else f"batch_id > {int(newest)}"
    con.execute(
        "CREATE OR REPLACE TEMP TABLE bs_scope_old AS SELECT * FROM spans "
        f"WHERE NOT coalesce({tail}, false) AND trace_id IN (SELECT trace_id FROM pending_traces)"
    )
    (old,) = con.execute("SELECT count(*) FROM bs_scope_old").fetchall()[0]
    rest = " UNION ALL SELECT * FROM bs_scope_old" if old else ""
    con.execute(f"CREATE OR REPLACE TEMP VIEW bs_scope AS SELECT * FROM spans WHERE {tail}{rest}")
    return "bs_scope"
