"""What `budgetscope derive` runs: re-derive `requests` from an archive's `spans` segments, on DuckDB or on Spark, into a
new folder of Parquet files (the archive itself is never written).

    budgetscope derive --archive fleet/ --out requests-rederived/ --engine spark --spark-master spark://head:7077

For archives filled in bulk (the OpenTelemetry Collector's file exporter, copied to object storage), where
deriving every trace on one machine is the slow part. The derivation is `derive.requests.requests_sql`, the
one the writer runs at each commit, transpiled for Spark (spark/dialect.py) and run there in two steps
(spark/requests_frame.py): both engines give the same rows.
All spans of the root are read as one: a trace whose spans reached two shards gives one row here, as a reader
of the root gives (the shards' own `requests` hold a partial row each, see docs/archive.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from budgetscope.archive.errors import ArchiveError
from budgetscope.derive.requests import present_sources, requests_sql
from budgetscope.spark.commands import spark_archive
from budgetscope.spark.requests_frame import requests_frame
from budgetscope.spark.session import SparkError, one_line


def _out_dir(out: str | os.PathLike, archive: str | os.PathLike) -> Path:
    out, root = Path(out).absolute(), Path(archive).absolute()
    if out == root or root in out.parents:
        raise ArchiveError(f"--out {out} is inside the archive; budgetscope never writes into an archive from here")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ArchiveError(f"--out {out} exists and is not an empty folder; nothing is overwritten")
    if not out.parent.is_dir():
        raise ArchiveError(f"cannot create {out}: folder {out.parent} does not exist")
    return out


def derive_duckdb(archive: str | os.PathLike, out: str | os.PathLike) -> int:
    """Derive into `out/requests.parquet` with DuckDB; returns the rows written."""
    # imported on use: duckdb 153 ms, protobuf 57 ms, orjson 28 ms to import
    from budgetscope.opener import Archive

    dest = _out_dir(out, archive)
    with Archive(archive, read_only=True, create=False) as a:
        sql = requests_sql("spans", present_sources(a.con))
        dest.mkdir(exist_ok=True)
        a.con.execute(f"COPY ({sql}) TO '{dest / 'requests.parquet'}' (FORMAT parquet)")
        return a.con.execute(f"SELECT count(*) FROM read_parquet('{dest / 'requests.parquet'}')").fetchone()[0]


def derive_spark(archive: str | os.PathLike, out: str | os.PathLike, master: str | None = None) -> int:
    """Derive into `out/` (Spark's part files) on Spark; returns the rows written."""
    dest = _out_dir(out, archive)
    with spark_archive(archive, master) as a:
        try:
            df, _ = requests_frame(a.spark, "spans", present_sources(a.con))
            df.write.mode("errorifexists").parquet(str(dest))
            return a.spark.read.parquet(str(dest)).count()
        except Exception as e:  # noqa: BLE001 - py4j, pyspark and JVM errors alike: one line
            raise SparkError(f"Spark: {one_line(e)}") from None
