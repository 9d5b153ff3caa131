"""Read-only SQL over an archive, with every file and network access of DuckDB switched off."""

from __future__ import annotations

import os
from dataclasses import dataclass

from budgetscope.archive.archive import Archive, ArchiveError
from budgetscope.archive.reader import STALE


class QueryError(ValueError):
    """SQL that cannot run here; the message is one line."""


@dataclass(slots=True)
class QueryResult:
    columns: list[str]
    types: list[str]
    rows: list[tuple]


def run_query(archive: str | os.PathLike, sql: str) -> QueryResult:
    """Run `sql` against the archive opened read-only, external access disabled and the configuration locked."""
    import duckdb

    with Archive(archive, sandbox=True, create=False) as a:
        try:
            # only statements that read: a segment file is in the allowed paths, so COPY TO could overwrite it
            reading = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
            statements = a.con.extract_statements(sql)
            if not statements:  # blank or only comments: DuckDB returns no cursor at all
                raise QueryError("no SQL statement to run")
            if {st.type for st in statements} - reading:
                raise QueryError("the archive is read-only to queries; budgetscope ingest is the way in")
            cur = a.con.execute(sql)
            rows = cur.fetchall() if cur.description else []
            cols = [d[0] for d in cur.description or []]
            types = [str(d[1]) for d in cur.description or []]
        except duckdb.Error as e:
            msg = str(e).splitlines()[0]
            # a missing segment: its sandbox refuses the directory glob DuckDB then tries
            if isinstance(e, (duckdb.IOException, duckdb.PermissionException)) and a.stale():
                msg = f"{archive}: {STALE}"
            elif "read-only mode" in msg:
                msg = "the archive is read-only to queries; budgetscope ingest is the way in"
            elif "disabled by configuration" in msg or "configuration has been locked" in msg:
                msg = f"queries may not touch files or settings ({msg})"
            raise QueryError(msg) from None
    return QueryResult(cols, types, rows)


__all__ = ["run_query", "QueryResult", "QueryError", "ArchiveError"]
