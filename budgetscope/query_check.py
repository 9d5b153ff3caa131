"""The check a statement passes before it runs in the query sandbox (`budgetscope query`, the dashboard's SQL page):
one SELECT, of a bounded size, that reads only the archive's tables and no setting, catalog or file.

Three looks, each on DuckDB's own reading of the statement, never on its text:

1. Size: at most MAX_SQL_BYTES bytes, MAX_EXPRESSIONS expressions and MAX_DEPTH levels of nesting (DuckDB's own
   `max_expression_depth`, fixed in the sandbox). DuckDB has crashed the process on statements past these (a
   grouped row of ~3,300 `corr` aggregates raises SIGFPE, 350 nested calls overflowed the parse tree's reader):
   the limits keep such statements out with one line, and the query runs in a process of its own besides
   (query_process.py).
2. The parse tree (`json_serialize_sql`, which serialises a SELECT and nothing else, EXPLAIN included): every table
   it names is one of the archive's or a CTE *in scope where it is named* (a CTE's own body does not see it, unless
   recursive; a later CTE is not seen by an earlier one: DuckDB resolves names so, and a CTE named `pg_settings`
   whose body read `pg_settings` once listed every setting). No name of the catalog (`pg_*`, `duckdb_*`,
   `sqlite_*`, `information_schema`) as a table or a CTE; no table function but range/generate_series/unnest; no
   function that reads a setting, a variable, the environment or the catalog (HIDDEN_FUNCTIONS).
3. The plan (`EXPLAIN (FORMAT JSON)`: DuckDB's binder has resolved every name, expanded views and macros): every
   scan is of the archive's segments or of a row generator (SCANS; `pg_get_viewdef()` is a macro over
   `duckdb_views()`, which shows here), and at most MAX_AGGREGATES aggregates and window functions in all
   (`COLUMNS(*)` expands here).
"""

from __future__ import annotations

import json

from budgetscope import schema

READ_ONLY = "the archive is read-only to queries: one SELECT at a time; budgetscope ingest is the way in"

MAX_SQL_BYTES = 64 * 1024
"""A statement's size in UTF-8 bytes."""
MAX_EXPRESSIONS = 10_000
"""Expressions in a statement's parse tree (a column, a constant, an operator, a call: one each)."""
MAX_DEPTH = 100
"""Nesting of expressions and subqueries, as DuckDB's parser counts it (`max_expression_depth`; its default 1,000)."""
TOO_DEEP = f"the statement nests expressions or subqueries more than {MAX_DEPTH} levels deep; write it flatter"
MAX_AGGREGATES = 1_000
"""Aggregates and window functions in the plan (`SUMMARIZE requests` has 307)."""

TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
"""Table functions that read no file and no setting."""
SCANS = frozenset(
    {
        "READ_PARQUET",  # the archive's views: DuckDB's allowed_paths admits the committed segments only
        "TABLE_SCAN",  # a single-file archive's tables
        "SEQ_SCAN",
        "RANGE",
        "GENERATE_SERIES",
        "UNNEST",
        "DUMMY_SCAN",
        "COLUMN_DATA_SCAN",
        "CTE_SCAN",
        "REC_CTE_SCAN",
        "DELIM_SCAN",
        "EMPTY_RESULT",
        "EXPRESSION_SCAN",
        "CHUNK_SCAN",
        "POSITIONAL_SCAN",
    }
)
"""What the leaves of a plan may be (DuckDB's physical operators): anything else reads the catalog or settings."""
CATALOG_PREFIXES = ("pg_", "duckdb_", "sqlite_", "information_schema")
HIDDEN_FUNCTIONS = frozenset(
    {
        "current_setting",
        "getvariable",
        "getenv",
        "which_secret",
        "in_search_path",
        "current_database",
        "current_catalog",
        "current_schema",
        "current_schemas",
        "current_query",
        "current_user",
        "current_role",
        "session_user",
        "user",
        "format_type",
        "col_description",
        "obj_description",
        "shobj_description",
        "get_block_size",
        "txid_current",
        "current_transaction_id",
        "current_connection_id",
        "current_query_id",
        "write_log",
    }
)
"""Scalar functions that read a setting, a variable, the environment or the catalog, or write DuckDB's log (also
every `pg_*`, `duckdb_*` and `has_*_privilege`)."""


class QueryError(ValueError):
    """SQL that cannot run here; the message is one line."""


def check_select(con, sql: str) -> None:
    """Raise QueryError unless `sql` is exactly one SELECT within the size limits that reads only the archive's
    public tables (docs/archive.md), the CTEs in scope and TABLE_FUNCTIONS, calls none of HIDDEN_FUNCTIONS, and
    whose plan DuckDB binds to SCANS only. `con`: the sandbox's connection (its `max_expression_depth` MAX_DEPTH)."""
    size = len(sql.encode("utf-8", "surrogatepass"))
    if size > MAX_SQL_BYTES:
        raise QueryError(f"the statement is {size:,} bytes; a query may have at most {MAX_SQL_BYTES:,}")
    statement = _parse(con, sql)
    _check_tree(statement)
    _check_plan(con, sql)


def _parse(con, sql: str) -> dict:
    (doc,) = con.execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchone()
    try:
        tree = json.loads(doc)
    except RecursionError:  # a parser allowed deeper nesting than the sandbox's (its connection was not one)
        raise QueryError(TOO_DEEP) from None
    if tree["error"]:
        msg = str(tree.get("error_message", ""))
        if "expression depth" in msg:
            raise QueryError(TOO_DEEP)
        if tree.get("error_type") == "parser":
            raise QueryError(f"Parser Error: {msg}".splitlines()[0])
        raise QueryError(READ_ONLY)
    if not tree["statements"]:  # blank or only comments
        raise QueryError("no SQL statement to run")
    if len(tree["statements"]) > 1:
        raise QueryError(f"{len(tree['statements'])} statements: run one SELECT at a time")
    return tree["statements"][0]


def _tables() -> set[str]:
    return {t.name for t in schema.PUBLIC}


def _check_tree(statement: dict) -> None:
    tables = _tables()
    expressions = 0
    stack: list[tuple[object, frozenset[str]]] = [(statement, frozenset())]
    while stack:
        x, scope = stack.pop()
        if isinstance(x, list):
            stack.extend((v, scope) for v in x)
            continue
        if not isinstance(x, dict):
            continue
        if "class" in x:
            expressions += 1
            if expressions > MAX_EXPRESSIONS:
                raise QueryError(f"the statement has more than {MAX_EXPRESSIONS:,} expressions; write it shorter")
        _check_node(x, scope, tables)
        ctes = (x.get("cte_map") or {}).get("map") or []
        if ctes:
            names = [str(e["key"]).lower() for e in ctes]
            for i, entry in enumerate(ctes):
                _check_cte_name(names[i])
                own = {names[i]} if _recursive(entry, names[i]) else set()
                stack.append((entry.get("value"), scope | set(names[:i]) | own))
            inner = scope | set(names)
            stack.extend((v, inner) for k, v in x.items() if k != "cte_map")
        else:
            stack.extend((v, scope) for v in x.values())


def _check_node(node: dict, scope: frozenset[str], tables: set[str]) -> None:
    kind = node.get("type")
    if kind in ("BASE_TABLE", "SHOW_REF"):
        path = _path(node, "table_name")
        if not path:  # DESCRIBE/SUMMARIZE of a query: the query is checked as any other
            return
        *qualifiers, name = path
        lowered = name.lower()
        in_scope = not qualifiers and lowered in scope
        if not in_scope and (qualifiers not in ([], ["main"]) or lowered not in tables):
            raise QueryError(
                f"queries read only the archive's tables ({', '.join(sorted(tables))}): '{'.'.join(path)}' is not one"
            )
    elif kind == "TABLE_FUNCTION":
        fn = _function_name(node.get("function") or {})
        if fn not in TABLE_FUNCTIONS:
            raise QueryError(
                f"queries may not touch files or settings: {fn}() is not allowed (tables: {', '.join(sorted(tables))})"
            )
    elif node.get("class") in ("FUNCTION", "WINDOW"):
        fn = _function_name(node)
        if _hidden(fn):
            raise QueryError(f"queries may not read settings or the catalog: {fn}() is not allowed")


def _check_cte_name(name: str) -> None:
    if name.startswith(CATALOG_PREFIXES):
        raise QueryError(f"a CTE may not take a name of DuckDB's catalog ('{name}'): name it otherwise")


def _recursive(entry: dict, name: str) -> bool:
    node = (entry.get("value") or {}).get("query_node") or {}
    return node.get("type") == "RECURSIVE_CTE_NODE" and str(node.get("cte_name", "")).lower() == name


def _path(node: dict, name_key: str) -> list[str]:
    """A table's name with its qualifiers, as DuckDB parsed it (`catalog.schema.name`, the parts given)."""
    path = (node.get("qualified_name") or {}).get("path")
    if path:
        return [str(p) for p in path]
    return [str(p) for p in (node.get("catalog_name"), node.get("schema_name"), node.get(name_key)) if p]


def _function_name(node: dict) -> str:
    path = (node.get("qualified_name") or {}).get("path")
    return str(path[-1] if path else node.get("function_name", "")).lower()


def _hidden(fn: str) -> bool:
    return (
        fn in HIDDEN_FUNCTIONS
        or fn.startswith(("pg_", "duckdb_"))
        or (fn.startswith("has_") and fn.endswith("_privilege"))
    )


def _check_plan(con, sql: str) -> None:
    """DuckDB's bound plan of the statement (it reads nothing: no ANALYZE): only SCANS at its leaves, at most
    MAX_AGGREGATES aggregates."""
    rows = con.execute(f"EXPLAIN (FORMAT JSON) {sql}").fetchall()
    aggregates = 0
    stack = [op for _, plan in rows for op in json.loads(plan)]
    while stack:
        op = stack.pop()
        name = str(op.get("name", "")).strip().upper()
        info = op.get("extra_info") or {}
        function = str(info.get("Function", "")).upper() if isinstance(info, dict) else ""
        children = op.get("children") or []
        if (function and function not in SCANS) or (not children and name not in SCANS):
            raise QueryError(f"queries may not read settings or the catalog ({(function or name).lower()})")
        if isinstance(info, dict):
            aggregates += _count(info.get("Aggregates"))
            if name == "WINDOW":
                aggregates += _count(info.get("Projections"))
        if aggregates > MAX_AGGREGATES:
            raise QueryError(
                f"the statement computes more than {MAX_AGGREGATES:,} aggregates (COLUMNS(*) and SUMMARIZE "
                "count each column); split it"
            )
        stack.extend(children)


def _count(x) -> int:
    if isinstance(x, list):
        return len(x)
    return 1 if x else 0


__all__ = [
    "check_select",
    "QueryError",
    "READ_ONLY",
    "TOO_DEEP",
    "MAX_SQL_BYTES",
    "MAX_EXPRESSIONS",
    "MAX_DEPTH",
    "MAX_AGGREGATES",
]
