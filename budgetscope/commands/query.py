"""`budgetscope query`: one read-only SELECT over an archive."""

from __future__ import annotations

import click

from budgetscope.commands.options import (
    ARCHIVE,
    SPARK_MASTER,
    UsageError,
    check_engine,
    engine_option,
    fail,
    format_option,
    output_rows,
)
from budgetscope.query_limits import MAX_RESULT_MB, MEMORY_MB, SPILL_MB


def _mib(name: str, default: int, least: int, help: str):
    """An option of MiB, at least `least`."""
    return click.option(name, type=click.IntRange(min=least), default=default, show_default=True, help=help)


@click.command()
@click.argument("sql")
@ARCHIVE
@format_option("table", "json", "csv")
@click.option(
    "--max-rows",
    type=click.IntRange(min=1),
    default=None,
    help="Print at most this many rows, and say on stderr when more matched. Default: all.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Stop a query still running after this many seconds (DuckDB engine). Default: none.",
)
@_mib(
    "--memory-mb",
    MEMORY_MB,
    64,
    "DuckDB's memory for the query (its process may hold this plus its own overhead, docs/cli.md).",
)
@_mib(
    "--spill-mb",
    SPILL_MB,
    0,
    "What the query may spill to a temporary directory of its own when memory runs short (0: nothing).",
)
@_mib(
    "--max-result-mb",
    MAX_RESULT_MB,
    1,
    "The result's size; a larger one is an error (narrow the query or use --max-rows).",
)
@engine_option("in a process of its own")
@SPARK_MASTER
def query(
    sql: str,
    archive: str,
    fmt: str,
    max_rows: int | None,
    timeout_s: float | None,
    memory_mb: int,
    spill_mb: int,
    max_result_mb: int,
    engine: str,
    spark_master: str | None,
) -> None:
    """Run one read-only SELECT over an archive (no writes, no file, setting or network access).

    Tables: spans, requests, ingest_batches, gpu_samples, server_metrics, engine_steps (see docs/archive.md).
    The SQL is DuckDB's dialect on either engine (Spark runs it transpiled). DuckDB's parser must read it as a
    single SELECT (DESCRIBE and SUMMARIZE included; EXPLAIN, COPY, SET, ATTACH and the like are refused), and
    it may read only those tables, its own CTEs and range/generate_series/unnest: no setting, catalog
    (pg_*, duckdb_*, information_schema) or file. At most 64 KiB of SQL, 10,000 expressions, 100 levels of
    nesting and 1,000 aggregates. The query runs in a process of its own within --memory-mb, --spill-mb and
    --timeout: a crash of DuckDB's is one line here.

    \b
      budgetscope query -a prod/ "SELECT tier, quantile_cont(queue_ms, 0.99) FROM requests GROUP BY 1"
    """
    from budgetscope.query import ArchiveError, QueryError
    from budgetscope.query_limits import QueryLimits
    from budgetscope.query_process import run_isolated

    check_engine(engine, spark_master)
    if engine == "spark" and timeout_s is not None:
        raise UsageError("--timeout applies to the DuckDB engine only")
    limits = QueryLimits(memory_mb, spill_mb, max_rows, max_result_mb, timeout_s)
    try:
        if engine == "spark":
            from budgetscope.spark.commands import run_query as run_on_spark

            res = run_on_spark(archive, sql, spark_master, max_rows=max_rows)
        else:
            res = run_isolated(archive, sql, limits)
    except (QueryError, ArchiveError) as e:
        raise fail(e) from None
    if res.oversize:
        raise UsageError(
            f"the result passed {max_result_mb:,} MiB (--max-result-mb) after {len(res.rows):,} rows; narrow the "
            "query, or print part of it with --max-rows"
        )
    if res.truncated:
        click.echo(
            f"budgetscope: more than {max_rows:,} rows matched; the first {max_rows:,} are printed (--max-rows)",
            err=True,
        )
    output_rows(res.columns, res.rows, fmt)
