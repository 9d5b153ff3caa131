"""`budgetscope query`: one read-only SELECT over an archive."""

from __future__ import annotations

import click

from budgetscope.commands.options import (
    ARCHIVE,
    ENGINE,
    SPARK_MASTER,
    UsageError,
    check_engine,
    fail,
    format_option,
    output_rows,
)


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
@ENGINE
@SPARK_MASTER
def query(
    sql: str,
    archive: str,
    fmt: str,
    max_rows: int | None,
    timeout_s: float | None,
    engine: str,
    spark_master: str | None,
) -> None:
    """Run one read-only SELECT over an archive (no writes, no file, setting or network access).

    Tables: spans, requests, ingest_batches, gpu_samples, server_metrics, engine_steps (see docs/archive.md).
    The SQL is DuckDB's dialect on either engine (Spark runs it transpiled). DuckDB's parser must read it as a
    single SELECT (DESCRIBE and SUMMARIZE included; EXPLAIN, COPY, SET, ATTACH and the like are refused), and
    it may read only those tables, its own CTEs and range/generate_series/unnest.

    \b
      budgetscope query -a prod/ "SELECT tier, quantile_cont(queue_ms, 0.99) FROM requests GROUP BY 1"
    """
    from budgetscope.query import ArchiveError, QueryError, run_query

    check_engine(engine, spark_master)
    if engine == "spark" and timeout_s is not None:
        raise UsageError("--timeout applies to the DuckDB engine only")
    try:
        if engine == "spark":
            from budgetscope.spark.commands import run_query as run_on_spark

            res = run_on_spark(archive, sql, spark_master, max_rows=max_rows)
        else:
            res = run_query(archive, sql, max_rows=max_rows, timeout_s=timeout_s)
    except (QueryError, ArchiveError) as e:
        raise fail(e) from None
    if res.truncated:
        click.echo(
            f"budgetscope: more than {max_rows:,} rows matched; the first {max_rows:,} are printed (--max-rows)",
            err=True,
        )
    output_rows(res.columns, res.rows, fmt)
