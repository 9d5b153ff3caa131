"""What `report --engine spark`, `query --engine spark` and `derive` run (the CLI stays a thin face)."""

from __future__ import annotations

import contextlib
import os

from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.reader import STALE
from budgetscope.spark.archive import VIEWS, Segments, SparkArchive
from budgetscope.spark.session import SparkError, session, stop

READ_ONLY = "the archive is read-only to queries; budgetscope ingest is the way in"
FORBIDDEN_FUNCTIONS = {
    "reflect",
    "java_method",
    "try_reflect",
    "read_parquet",
    "read_csv",
    "read_json",
    "read_csv_auto",
    "read_json_auto",
    "parquet_scan",
    "read_text",
    "read_blob",
    "glob",
}


@contextlib.contextmanager
def spark_archive(
    path: str | os.PathLike,
    master: str | None = None,
    since_ns: int | None = None,
    until_ns: int | None = None,
    *,
    quick_jit: bool = False,
):
    """A SparkArchive of `path` on a fresh session of `master`, stopped on exit (`quick_jit`: session.QUICK_JIT,
    for a command of few statements). Everything is checked that can be before Spark starts: the archive's
    manifests and segments first, then Java and the master."""
    Segments(path, since_ns, until_ns)  # a bad archive is told without waiting for a JVM
    running = active_session()
    # in-process callers (tests, notebooks) may have one running already
    spark = running or session(master, quick_jit=quick_jit)
    try:
        with SparkArchive(path, spark, since_ns=since_ns, until_ns=until_ns) as a:
            yield a
    finally:
        if running is None:
            with contextlib.suppress(Exception):
                stop(spark)


def active_session():
    try:
        # imported on use: pyspark 91 ms to import
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    return SparkSession.getActiveSession()


def check_read_only(sql: str, views) -> None:
    """`budgetscope query` on Spark takes one SELECT over the archive's views, and nothing that reaches files or
    the JVM (`parquet.`/path`` tables, reflect): Spark has no sandbox setting as DuckDB has."""
    # imported on use: sqlglot 198 ms to import
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError

    try:
        trees = [t for t in sqlglot.parse(sql, read="duckdb") if t is not None]
    except ParseError as e:
        raise SparkError(f"SQL not understood: {str(e).splitlines()[0]}") from None
    if len(trees) != 1:
        raise SparkError("one statement at a time")
    tree = trees[0]
    if not isinstance(tree, (exp.Select, exp.SetOperation, exp.Subquery)):
        raise SparkError(READ_ONLY)
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for t in tree.find_all(exp.Table):
        name = t.name.lower()
        if t.args.get("db") or t.args.get("catalog") or (name not in views and name not in ctes):
            if isinstance(t.this, exp.Func) or not name:
                raise SparkError("queries may not touch files (only the archive's tables)")
            raise SparkError(f"no table {t.sql()} (tables: {', '.join(views)})")
    for f in tree.find_all(exp.Func):
        name = (f.name if isinstance(f, exp.Anonymous) else f.sql_name()).lower()
        if name in FORBIDDEN_FUNCTIONS:
            raise SparkError(f"queries may not call {name}")


def run_query(path: str | os.PathLike, sql: str, master: str | None = None, *, max_rows: int | None = None):
    """`budgetscope query --engine spark`: the statement (DuckDB's dialect, as for `--engine duckdb`) transpiled
    and run on Spark over the archive's views. Returns budgetscope.query.QueryResult, at most `max_rows` rows."""
    # imported on use: duckdb 153 ms, protobuf 57 ms, orjson 28 ms to import
    from budgetscope.query import QueryResult

    check_read_only(sql, VIEWS)
    with spark_archive(path, master, quick_jit=True) as a:
        try:
            cur = a.con.execute(sql)
        except SparkError:
            if not a.stale():
                raise
            raise SparkError(f"{path}: {STALE}") from None
        rows = cur.fetchall()  # Spark collects the whole result; the cap bounds what is printed
    truncated = max_rows is not None and len(rows) > max_rows
    return QueryResult(
        [d[0] for d in cur.description],
        [d[1] for d in cur.description],
        rows[:max_rows] if truncated else rows,
        truncated,
    )


__all__ = ["spark_archive", "run_query", "check_read_only", "SparkError", "ArchiveError"]
