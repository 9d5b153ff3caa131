"""An archive's committed segments as Spark temporary views, and a DB-API-like face over Spark SQL that
budgetscope's analysis code (written in DuckDB SQL) runs on unchanged.

    spark = session("local[2]")
    with SparkArchive("fleet/", spark) as a:
        build_report(a.con, budgets)          # the same SQL as the DuckDB reader's, transpiled (dialect.py)

The segments are those `ArchiveReader` chooses (the manifest of the root, or of each shard; the window's
partitions with `since_ns`/`until_ns`), checked before Spark reads them: a segment that is missing, or that is
not a whole Parquet file (torn, or a foreign file), is one clear error. `requests` drops the rows a later
commit re-derived the way the DuckDB reader does (reader.py): a row goes when a `requests_deletes` row of the
same shard and trace has a higher `_seq`; and, over a sharded root, a trace whose spans are on several shards
is one row derived from all of them (archive/split_traces.py).
"""

from __future__ import annotations

import os
import re
from datetime import timezone
from pathlib import Path

from budgetscope import schema
from budgetscope.archive.archive import is_single_file
from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.reader import ArchiveReader, affected_segments, check_segment
from budgetscope.archive.split_traces import split_spans_sql
from budgetscope.spark import quantiles
from budgetscope.spark.dialect import DialectError, archive_columns, emit, parse, spark_type, to_spark
from budgetscope.spark.requests_frame import SERVED_VIEW, drop_held_views, requests_frame
from budgetscope.spark.session import SparkError, one_line

STORED = {
    t.name: t for t in (schema.SPANS, schema.REQUESTS, schema.INGEST_BATCHES, schema.GPU_SAMPLES, schema.SERVER_METRICS)
}
VIEWS = (*STORED, "engine_steps")
DEAD_INLINE = 100_000
"""At most this many re-derived traces are dropped from `requests` by a filter of literals (SparkArchive._live);
more by a join in every statement."""
SPLIT_VIEWS = ("bs_split_traces", "bs_split_spans")
"""A sharded root's traces with spans on several shards, and their spans (not queryable: `query` sees VIEWS)."""


class Segments(ArchiveReader):
    """The segments an `ArchiveReader` of `path` would read (no DuckDB connection, no views)."""

    def __init__(self, path: str | os.PathLike, since_ns: int | None = None, until_ns: int | None = None):  # noqa: D107 - the class says it

        self.path = Path(path)
        if is_single_file(self.path):
            raise ArchiveError(f"{self.path}: spark reads folder archives; convert first with budgetscope convert")
        self._groups = self._manifests()
        self._segments = self._choose(since_ns, until_ns)
        for segs in self._segments.values():
            for s in segs:
                check_segment(self.path, s.path)

    def close(self) -> None:  # nothing open
        pass


class Cursor:
    """The result of one statement: `fetchall()`, `fetchone()`, `description` (name, type)."""

    def __init__(self, rows: list[tuple], description: list[tuple[str, str]]):
        self._rows = rows
        self.description = description
        self._at = 0

    def fetchall(self) -> list[tuple]:
        rows, self._at = self._rows[self._at :], len(self._rows)
        return rows

    def fetchone(self):
        if self._at >= len(self._rows):
            return None
        self._at += 1
        return self._rows[self._at - 1]


def _in_utc(row, zoned: list[bool]) -> tuple:
    """A row with its TIMESTAMP values as UTC datetimes, as DuckDB gives its TIMESTAMP WITH TIME ZONE: pyspark
    hands them over naive, in this process's local time."""
    if not any(zoned):
        return tuple(row)
    return tuple(v.astimezone(timezone.utc) if z and v is not None else v for v, z in zip(row, zoned))


UNRESOLVED = re.compile(r"\[UNRESOLVED_ROUTINE\] Cannot resolve routine `([^`]+)`")


def not_on_spark(e: BaseException) -> str | None:
    """What a DuckDB function Spark has no counterpart for says, or None: `query --engine spark` runs DuckDB's
    dialect transpiled, and what cannot be carried over should say so rather than show Spark's search path."""
    m = UNRESOLVED.search(str(e))
    if not m:
        return None
    return (
        f"{m.group(1).lower()}() cannot run on Spark (no such function there, and budgetscope does not "
        "translate it); run this query with --engine duckdb"
    )


class SparkConnection:
    """`execute(sql, params)` of budgetscope's DuckDB SQL on Spark: transpiled once per statement."""

    threads = 2
    """Tiers the report runs at once (report._tier_reports): while one waits on its job's last task or is
    planned here, the other's tasks run."""

    def __init__(self, spark, statements: list[str] | None = None, memo: dict | None = None):
        self.spark = spark
        self.statements = [] if statements is None else statements  # the Spark SQL run, for tests and debugging
        self.memo = {} if memo is None else memo  # facts of the archive's fixed segments (coverage.contents)

    def cursor(self) -> SparkConnection:
        """A connection for another thread, on the same session (its statements are recorded with these)."""
        return SparkConnection(self.spark, self.statements, self.memo)

    def close(self) -> None:  # a cursor holds nothing of its own
        pass

    def execute(self, sql: str, params=None) -> Cursor:

        try:
            tree, bound = parse(sql, params)
            text = emit(tree, bound)
        except DialectError as e:
            raise SparkError(str(e)) from None
        p = quantiles.plan(tree, bound)
        if p is not None:
            try:
                return self._selected(p, bound)
            except quantiles.Mismatch:
                pass  # exact all the same, with Spark's percentile
        self.statements.append(text)
        df, rows = self._run(text)
        zoned = [f.dataType.typeName() == "timestamp" for f in df.schema.fields]
        described = [(f.name, f.dataType.simpleString()) for f in df.schema.fields]
        return Cursor([_in_utc(r, zoned) for r in rows], described)

    def _run(self, text: str):
        """(the DataFrame of Spark SQL `text`, its rows collected); a failure is one line."""
        try:
            df = self.spark.sql(text)
            return df, df.collect()
        except Exception as e:  # noqa: BLE001 - AnalysisException, Py4JJavaError, ...: one line
            raise SparkError(f"Spark: {not_on_spark(e) or one_line(e)}") from None

    def _selected(self, p, bound: list[str]) -> Cursor:
        """A global aggregate with quantile_cont, its quantiles selected exactly (spark/quantiles.py)."""

        def execute(tree) -> list[tuple]:
            text = emit(tree, bound)
            self.statements.append(text)
            return [tuple(r) for r in self._run(text)[1]]

        row = quantiles.run(p, execute)
        described = [(e.alias_or_name, "double") for e in p.tree.expressions]
        if p.rest is not None:
            rest, positions = p.rest
            text = emit(rest, bound)
            self.statements.append(text)
            df, (got,) = self._run(text)
            for pos, v, f in zip(positions, got, df.schema.fields):
                row[pos] = v
                described[pos] = (f.name, f.dataType.simpleString())
        return Cursor([tuple(row)], described)

    def sql(self, text: str):
        """A Spark DataFrame of Spark SQL (no transpiling)."""
        return self.spark.sql(text)


class SparkArchive:
    """The committed segments of a folder archive (or a sharded root) as Spark temporary views named as
    the DuckDB reader's (docs/archive.md): spans, requests, ingest_batches, gpu_samples, server_metrics,
    engine_steps. `.con` runs budgetscope's SQL on them."""

    def __init__(self, path: str | os.PathLike, spark, *, since_ns: int | None = None, until_ns: int | None = None):
        self.path = Path(path)
        self.spark = spark
        self.segments = Segments(self.path, since_ns, until_ns)
        self.manifest = self.segments.manifest if hasattr(self.segments, "manifest") else None
        self.con = SparkConnection(spark)
        self.split_traces = 0 if len(self.segments._by_group) > 1 else None  # as ArchiveReader.split_traces
        self._cached = []  # what the split traces' join cached, released on close
        try:
            for name, table in STORED.items():
                df = self._requests() if name == "requests" else self._scan(self.segments._segments[name], table)
                df.createOrReplaceTempView(name)
            self.spark.sql(
                to_spark(schema.ENGINE_STEPS_VIEW.replace("CREATE OR REPLACE VIEW", "CREATE OR REPLACE TEMPORARY VIEW"))
            )
        except ArchiveError:
            raise
        except Exception as e:  # noqa: BLE001 - AnalysisException, Py4JJavaError, ...: one line
            raise SparkError(f"Spark cannot read {self.path}: {one_line(e)}") from None

    def files(self, table: str) -> list[Path]:
        return [self.path / s.path for s in self.segments._segments[table]]

    def stale(self) -> bool:
        """True once a segment this read lists is gone (as `ArchiveReader.stale`)."""
        return self.segments.stale()

    def _empty(self, table: schema.Table):
        ddl = ", ".join(f"`{c.name}` {spark_type(c.type)}" for c in table.columns)
        return self.spark.createDataFrame([], ddl)

    def _read(self, segs, cols: list[str], table: schema.Table | None = None):
        """The columns `cols` of the segments `segs`. With `table`, read by its schema (and `_seq`): a segment
        written before a column of `table` was added reads it as NULL (as reader.requests_scan). Not Spark's
        `mergeSchema`, which fails on the same column marked required in one file and optional in another."""
        paths = [str(self.path / s.path) for s in segs]
        reader = self.spark.read.option("mergeSchema", "false")
        if table:
            reader = reader.schema(
                ", ".join(f"`{c.name}` {spark_type(c.type)}" for c in table.columns) + ", `_seq` BIGINT"
            )
        return reader.parquet(*paths).select(*cols)

    def _scan(self, segs, table: schema.Table):
        if not segs:
            return self._empty(table)
        return self._read(segs, [c.name for c in table.columns])

    def _requests(self):
        """Every shard's `requests` segments, less the rows a later commit of that shard re-derived. As the
        DuckDB reader: only segments a delete can reach (reader.affected_segments) are joined."""
        cols = [c.name for c in schema.REQUESTS.columns]
        parts = []
        for g in self.segments._by_group:
            req, dels = g["requests"], g["requests_deletes"]
            if not req:
                continue
            hit = affected_segments(req, dels)
            plain = [s for s in req if s not in hit]
            if plain:
                parts.append(self._read(plain, cols, schema.REQUESTS))
            if hit:
                r = self._read(hit, [*cols, "_seq"], schema.REQUESTS).alias("r")
                d = (
                    self._read(dels, ["trace_id", "_seq"])
                    .groupBy("trace_id")
                    .max("_seq")
                    .withColumnRenamed("max(_seq)", "_del_seq")
                    .withColumnRenamed("trace_id", "_del_trace")
                )
                parts.append(self._live(r, d).select(*cols))
        if not parts:
            return self._empty(schema.REQUESTS)
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        return self._join_split_traces(out)

    def _live(self, r, d):
        """The rows of `r` that no delete of `d` (`_del_trace`, `_del_seq`) drops: a row goes when a delete of its
        trace has a higher `_seq` (reader.requests_sql). The deletes are resolved once, here: up to DEAD_INLINE
        traces become a filter of literals (one `IN` set per commit that deleted: no join, no shuffle, no re-read
        of `requests_deletes` in each statement; the DuckDB reader likewise resolves them at open), more stay a
        join."""
        # imported on use: pyspark 91 ms to import
        from pyspark.sql import functions as F

        dead = d.limit(DEAD_INLINE + 1).collect()
        if len(dead) > DEAD_INLINE:
            return r.join(d, (r["trace_id"] == d["_del_trace"]) & (r["_seq"] < d["_del_seq"]), "left_anti")
        by_seq: dict[int, list[str]] = {}
        for trace, seq in dead:
            by_seq.setdefault(seq, []).append(trace)
        if not by_seq:
            return r
        gone = None
        for seq, traces in sorted(by_seq.items()):
            c = F.col("trace_id").isin(traces) & (F.col("_seq") < F.lit(seq))
            gone = c if gone is None else gone | c
        return r.where(~F.coalesce(gone, F.lit(False)))

    def _join_split_traces(self, stored):
        """`stored` with the rows of traces whose spans are on more than one shard replaced by rows derived from
        all their spans, as the DuckDB reader does (archive/split_traces.py); sets `split_traces`. Needs the
        `spans` view (created before `requests`)."""
        # imported on use: pyspark 91 ms to import
        from pyspark.sql import functions as F

        groups = [g for g in self.segments._by_group if g["spans"]]
        if len(groups) < 2:
            return stored
        ids = [
            self._read(g["spans"], ["trace_id"]).distinct().withColumn("bs_shard", F.lit(i))
            for i, g in enumerate(groups)
        ]
        every = ids[0]
        for d in ids[1:]:
            every = every.unionByName(d)
        split = every.groupBy("trace_id").count().where("count > 1").select("trace_id").cache()
        self._cached.append(split)
        self.split_traces = split.count()
        if not self.split_traces:
            return stored
        split.createOrReplaceTempView(SPLIT_VIEWS[0])
        spans = self.spark.sql(to_spark(split_spans_sql("spans", SPLIT_VIEWS[0]))).cache()
        spans.createOrReplaceTempView(SPLIT_VIEWS[1])
        present = {r[0] for r in self.spark.sql(f"SELECT DISTINCT source FROM {SPLIT_VIEWS[1]}").collect()}
        frame, held = requests_frame(self.spark, SPLIT_VIEWS[1], present, {SPLIT_VIEWS[1]: archive_columns()["spans"]})
        derived = frame.select(*[c.name for c in schema.REQUESTS.columns]).localCheckpoint()
        self._cached += [spans, *held, derived]
        return stored.join(split, "trace_id", "left_anti").unionByName(derived)

    def pending_traces(self) -> int:
        return 0

    def __enter__(self) -> SparkArchive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for df in self._cached:
            df.unpersist()
        try:
            for v in (*VIEWS, *SPLIT_VIEWS, SERVED_VIEW):
                self.spark.catalog.dropTempView(v)
            drop_held_views(self.spark)
        except Exception:  # noqa: BLE001 - a session already stopped
            pass
