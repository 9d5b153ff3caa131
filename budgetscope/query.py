"""Read-only SQL over an archive: one statement that DuckDB's own parser reads as a SELECT, over the archive's
tables only, with every file and network access of DuckDB switched off.

Why a parse, not a list of statement types: the archive's segments are in DuckDB's `allowed_paths` (a reader
must read them), and DuckDB allows writing wherever it allows reading. A check of statement types let
`EXPLAIN ANALYZE COPY … TO '<segment>'` through. `json_serialize_sql` serialises only a SELECT (anything else,
EXPLAIN included, is an error), so what runs is a query by construction; its tree then names every table and
table function the query reads, and only the archive's own tables (and CTEs) may be read.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass

import duckdb

from budgetscope import schema
from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.reader import STALE
from budgetscope.opener import Archive

READ_ONLY = "the archive is read-only to queries: one SELECT at a time; budgetscope ingest is the way in"
# table functions that read no file and no setting
TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
# scalar functions that would disclose the sandbox's settings (`allowed_paths` names every segment's absolute path)
HIDDEN_FUNCTIONS = frozenset({"current_setting", "getvariable", "getenv"})


class QueryError(ValueError):
    """SQL that cannot run here; the message is one line."""


@dataclass(slots=True)
class QueryResult:
    columns: list[str]
    types: list[str]
    rows: list[tuple]
    truncated: bool = False  # more rows than `max_rows` matched; `rows` holds the first `max_rows`


def run_query(
    archive: str | os.PathLike, sql: str, *, max_rows: int | None = None, timeout_s: float | None = None
) -> QueryResult:
    """Run `sql` (one SELECT) against the archive opened read-only, external access disabled and the configuration
    locked. At most `max_rows` rows come back (`truncated` says whether more matched); a query still running after
    `timeout_s` seconds is interrupted (QueryError)."""
    with Archive(archive, sandbox=True, create=False) as a:
        check_select(a.con, sql)
        timer = threading.Timer(timeout_s, a.con.interrupt) if timeout_s else None
        try:
            if timer:
                timer.start()
            cur = a.con.execute(sql)
            if cur.description is None:
                rows = []
            elif max_rows is None:
                rows = cur.fetchall()
            else:
                rows = cur.fetchmany(max_rows + 1)
            cols = [d[0] for d in cur.description or []]
            types = [str(d[1]) for d in cur.description or []]
        except duckdb.InterruptException:
            raise QueryError(f"the query ran past its {timeout_s:g} s limit and was stopped") from None
        except duckdb.Error as e:
            msg = str(e).splitlines()[0]
            # a missing segment: its sandbox refuses the directory glob DuckDB then tries
            if isinstance(e, (duckdb.IOException, duckdb.PermissionException)) and a.stale():
                msg = f"{archive}: {STALE}"
            elif "read-only mode" in msg:
                msg = READ_ONLY
            elif "disabled by configuration" in msg or "configuration has been locked" in msg:
                msg = f"queries may not touch files or settings ({msg})"
            raise QueryError(msg) from None
        finally:
            if timer:
                timer.cancel()
    truncated = max_rows is not None and len(rows) > max_rows
    return QueryResult(cols, types, rows[:max_rows] if truncated else rows, truncated)


def check_select(con, sql: str) -> None:
    """Raise QueryError unless `sql` is exactly one SELECT that reads only the archive's public tables
    (docs/archive.md), its own CTEs and the table functions in TABLE_FUNCTIONS, and calls none of HIDDEN_FUNCTIONS."""
    (doc,) = con.execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchone()
    tree = json.loads(doc)
    if tree["error"]:
        if tree.get("error_type") == "parser":
            raise QueryError(f"Parser Error: {tree['error_message']}".splitlines()[0])
        raise QueryError(READ_ONLY)
    if not tree["statements"]:  # blank or only comments
        raise QueryError("no SQL statement to run")
    if len(tree["statements"]) > 1:
        raise QueryError(f"{len(tree['statements'])} statements: run one SELECT at a time")
    tables = {t.name for t in schema.PUBLIC}
    ctes = {name.lower() for name in _cte_names(tree)}
    for node in _nodes(tree):
        kind = node.get("type")
        if kind == "BASE_TABLE":
            name = node["table_name"]
            if (
                node.get("catalog_name")
                or node.get("schema_name") not in ("", "main")
                or (name.lower() not in tables | ctes)
            ):
                raise QueryError(
                    f"queries read only the archive's tables ({', '.join(sorted(tables))}): {_quoted(node)} is not one"
                )
        elif kind == "TABLE_FUNCTION":
            fn = node["function"].get("function_name", "").lower()
            if fn not in TABLE_FUNCTIONS:
                raise QueryError(
                    f"queries may not touch files or settings: {fn}() is not allowed (tables: "
                    f"{', '.join(sorted(tables))})"
                )
        elif node.get("class") == "FUNCTION" and node.get("function_name", "").lower() in HIDDEN_FUNCTIONS:
            raise QueryError(f"queries may not read settings: {node['function_name']}() is not allowed")


def _nodes(tree):
    """Every object in the parse tree, depth first."""
    stack = [tree]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            yield x
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)


def _cte_names(tree) -> list[str]:
    return [
        entry["key"]
        for node in _nodes(tree)
        if isinstance(node.get("cte_map"), dict)
        for entry in node["cte_map"].get("map", [])
    ]


def _quoted(node: dict) -> str:
    parts = [p for p in (node.get("catalog_name"), node.get("schema_name"), node["table_name"]) if p]
    return "'" + ".".join(parts) + "'"


__all__ = ["run_query", "check_select", "QueryResult", "QueryError", "ArchiveError"]
