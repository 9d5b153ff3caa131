"""Deriving what landed: the `requests` rows of every trace in a working set's `pending_traces`.

A writer's working set (a DuckDB connection with the tables of budgetscope/schema.py) records, in the transaction
that lands spans, the traces they touched; `derive_pending` replaces those traces' `requests` rows, and empties
`pending_traces`, in one transaction, so a crash between a landing and its derivation loses nothing: the next
writer derives them.
"""

from __future__ import annotations

from budgetscope.derive.requests import present_sources, requests_sql


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
    # The spans of the pending traces, read once: every adapter scans its scope, and a filtered scan of
    # a large archive per adapter cost 0.2 s for one small batch. On a fresh archive the scope is all spans.
    scope = "spans" if not existing else "bs_scope"
    con.execute("BEGIN TRANSACTION")
    try:
        if track:
            con.execute(
                "INSERT INTO bs_superseded SELECT trace_id, arrival_ns FROM requests "
                "WHERE trace_id IN (SELECT trace_id FROM pending_traces)"
            )
            con.execute("INSERT INTO bs_derived SELECT trace_id FROM pending_traces")
        if existing:
            con.execute(
                "CREATE OR REPLACE TEMP TABLE bs_scope AS "
                "SELECT * FROM spans WHERE trace_id IN (SELECT trace_id FROM pending_traces)"
            )
            con.execute("DELETE FROM requests WHERE trace_id IN (SELECT trace_id FROM pending_traces)")
        # by name: a file that gained columns later (duckdb_archive) may hold them in another order
        con.execute(f"INSERT INTO requests BY NAME {requests_sql(scope, present_sources(con, scope))}")
        (n,) = con.execute(
            "SELECT count(*) FROM requests WHERE trace_id IN (SELECT trace_id FROM pending_traces)"
        ).fetchall()[0]
        (orphans,) = con.execute(orphans_sql(scope)).fetchall()[0] if count_orphans else (0,)
        con.execute("DELETE FROM pending_traces")
        if existing:
            con.execute("DROP TABLE bs_scope")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    return n, orphans
