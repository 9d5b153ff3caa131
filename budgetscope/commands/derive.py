"""`budgetscope derive`: re-derive `requests` from an archive's spans into a new folder of Parquet, on DuckDB
or Spark (spark/derive.py)."""

from __future__ import annotations

import click

from budgetscope.commands.options import ENGINE, SPARK_MASTER, check_engine, fail


@click.command()
@click.option("--archive", "-a", required=True, type=click.Path(), help="Archive folder or sharded root.")
@click.option("--out", "-o", required=True, type=click.Path(), help="New folder for the derived requests (Parquet).")
@ENGINE
@SPARK_MASTER
def derive(archive: str, out: str, engine: str, spark_master: str | None) -> None:
    """Re-derive `requests` from the archive's spans into a new folder of Parquet (the archive is only read).

    The same derivation as ingest and collect, on DuckDB here or on Spark (transpiled): the same rows.

    \b
      budgetscope derive -a fleet/ -o rederived/ --engine spark --spark-master spark://head:7077
    """
    from budgetscope.archive.errors import ArchiveError
    from budgetscope.spark.derive import derive_duckdb, derive_spark

    check_engine(engine, spark_master)
    try:
        n = derive_spark(archive, out, spark_master) if engine == "spark" else derive_duckdb(archive, out)
    except ArchiveError as e:
        raise fail(e) from None
    click.echo(f"{out}: {n:,} requests derived from the spans of {archive} ({engine})")
