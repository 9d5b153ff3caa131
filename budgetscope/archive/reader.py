"""Reading an archive while its writer runs: DuckDB views (and polars LazyFrames) over the committed segments.

    import budgetscope.archive
    with budgetscope.archive.open("prod/") as a:
        a.requests.aggregate("tier, quantile_cont(queue_ms, 0.99)").show()   # a DuckDB relation
        a.lazy("requests").group_by("tier").len().collect()               # a polars LazyFrame

The reader takes one manifest and keeps to it: every query of one reader sees the same commit. Open a new
reader to see newer data (the dashboard's `--live` mode does so on each refresh). While a writer runs, a reader
can keep to its commit for the archive's grace (60 s unless `collect --reader-grace` set another) after a newer
commit replaced its segments; then they are deleted, its queries fail on a missing file, and `stale()` says so:
open a new reader. A sharded root
(`shard=<id>/` archives, shards.py) reads as one archive: the last commit of each shard, with the traces whose
spans reached more than one shard derived again from all their spans (split_traces.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from budgetscope import schema
from budgetscope.archive import manifest as mf
from budgetscope.archive.archive import is_single_file
from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.segments import sql_list
from budgetscope.archive.shards import is_sharded, shards
from budgetscope.archive.split_traces import join_split_traces
from budgetscope.archive.tables import TableAccess, polars

# duckdb is imported where a connection is made: 175 ms to import (python -X importtime, 2 cores).

WINDOW_MARGIN_NS = mf.HOUR_NS
"""With a time window, tables other than `requests` keep the segments within this much of it: a request's
spans, steps and samples can start before its arrival (a client span) or end well after it (a long decode)."""


def _empty(table: schema.Table) -> str:
    cols = ", ".join(f"CAST(NULL AS {c.type}) AS {c.name}" for c in table.columns)
    return f"SELECT {cols} WHERE false"


def _scan(root: Path, segs, table: schema.Table) -> str:
    if not segs:
        return _empty(table)
    cols = ", ".join(c.name for c in table.columns)
    return f"SELECT {cols} FROM read_parquet({sql_list(root, segs)}, hive_partitioning = false)"


def requests_scan(root: Path, segs, row_keys: bool = False) -> str:
    """The `requests` segments `segs` as one relation with every column of schema.REQUESTS and `_seq` (and, with
    `row_keys`, `file_index`, `file_row_number`). Columns are matched by name: a segment written before a column
    was added (docs/archive.md, "Older archives") reads it as NULL, whichever order the segments come in."""
    typed = ", ".join(f"CAST(NULL AS {c.type}) AS {c.name}" for c in schema.REQUESTS.columns)
    keys = ", file_index, file_row_number" if row_keys else ""
    null_keys = ", NULL::UBIGINT AS file_index, NULL::BIGINT AS file_row_number" if row_keys else ""
    return f"""(SELECT {typed}, NULL::BIGINT AS _seq{null_keys} WHERE false
  UNION ALL BY NAME SELECT *{keys} FROM read_parquet({sql_list(root, segs)}, hive_partitioning = false,
                                                      union_by_name = true))"""


def requests_sql(root: Path, req, dels) -> str:
    """`requests` over its segments: a row is dropped when a later commit re-derived its trace (a
    `requests_deletes` row of the same trace with a higher `_seq`)."""
    if not req:
        return _empty(schema.REQUESTS)
    cols = ", ".join(f"r.{c.name}" for c in schema.REQUESTS.columns)
    scan = requests_scan(root, req)
    if not dels:
        return f"SELECT {cols} FROM {scan} r"
    return f"""SELECT {cols} FROM {scan} r
LEFT JOIN (SELECT trace_id, max(_seq) AS _seq FROM read_parquet({sql_list(root, dels)}, hive_partitioning = false)
           GROUP BY trace_id) d ON d.trace_id = r.trace_id
WHERE d._seq IS NULL OR r._seq >= d._seq"""


PARQUET_MAGIC = b"PAR1"


def check_segment(root: Path, rel: str) -> None:
    """A listed segment must be there and be a whole Parquet file (its magic at both ends, a footer that fits):
    a torn or foreign file is one clear error before any engine reads it."""
    p = root / rel
    try:
        with p.open("rb") as f:
            head = f.read(4)
            size = f.seek(0, os.SEEK_END)
            f.seek(max(size - 8, 0))
            tail = f.read(8) if size >= 12 else b""
    except FileNotFoundError:
        raise ArchiveError(
            f"{root} lists a segment that is not there ({rel}); was it copied while compaction ran? copy it again"
        ) from None
    except OSError as e:
        raise ArchiveError(f"cannot read segment {rel}: {e.strerror or e}") from None
    footer = int.from_bytes(tail[:4], "little") if tail else -1
    if head != PARQUET_MAGIC or tail[4:] != PARQUET_MAGIC or not 0 < footer <= size - 12:
        raise ArchiveError(
            f"segment {rel} is not a whole Parquet file (torn, or not the archive's own); "
            "restore it from a copy of the archive"
        )


def affected_segments(req, dels) -> list:
    """The `requests` segments that a delete can reach. A delete lies in the time range of the row it drops (it
    carries that row's `arrival_ns`; compaction relies on the same), and drops rows of a lower `_seq` only; the
    rows of a level-0 segment all have the `_seq` of the commit that wrote it (`Segment.seq`)."""
    out = []
    for r in req:
        over = [d for d in dels if d.min_ns <= r.max_ns and d.max_ns >= r.min_ns]
        if over and (r.level > 0 or r.seq < max(d.seq for d in over)):
            out.append(r)
    return out


DEAD_TABLE = "bs_reader.requests_dead"
"""The reader's table of the `requests` rows that a later commit re-derived, as row keys (see ROW_KEY). Not a
TEMP table: the views must work from every cursor of the connection."""

ROW_KEY = "((r.file_index::BIGINT << 32) | r.file_row_number)"
"""A row of a `read_parquet` list `r` as one integer: the file's position in the list, the row's in the file."""


STALE = (
    "a newer commit replaced the segments this read began with, and they were deleted once readers' grace "
    "had passed (the writer compacted or expired them meanwhile; `collect --reader-grace` gives readers "
    "longer); run it again"
)
"""What a read that outlived its commit's files says (see `ArchiveReader.stale`)."""


class ArchiveReader(TableAccess):
    """A consistent read of one commit of an archive: `.con` has the public tables and views of
    docs/archive.md. `since_ns`/`until_ns` keep only the segments that can hold rows of that window."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        since_ns: int | None = None,
        until_ns: int | None = None,
        sandbox: bool = False,
        settings: dict | None = None,
        derive_sql: Callable[[str, set[str]], str] | None = None,
    ):
        """`sandbox`: the SQL may read the committed segments and no other file, DuckDB's configuration locked, with
        `settings` (DuckDB's, such as `memory_limit`) fixed before it is. `derive_sql(spans, sources)`: the writer's derivation (`derive.requests.requests_sql`), for the traces
        of a sharded root split across shards; without it, reading a root with such traces is an error."""
        # imported on use: duckdb 153 ms to import
        import duckdb

        self.path = Path(path)
        if is_single_file(self.path):
            raise ArchiveError(f"{self.path} is a single-file archive: open it with budgetscope.archive.open")
        self._groups = self._manifests()  # (path prefix, manifest): one, or one a shard
        self.manifest = self._groups[0][1] if len(self._groups) == 1 else _union(self._groups)
        self.read_only = True
        self.split_traces: int | None = None  # of a sharded root: traces with spans on several shards (joined)
        self._derive_sql = derive_sql
        self.con = duckdb.connect()
        self.con.execute("SET enable_progress_bar = false")
        # segments are immutable (a path is never reused), so their footers may be cached for the reader's life
        self.con.execute("SET parquet_metadata_cache = true")
        self._segments = self._choose(since_ns, until_ns)
        try:
            for segs in self._segments.values():
                for seg in segs:
                    check_segment(self.path, seg.path)
        except ArchiveError:
            self.con.close()
            raise
        self._create_views()
        if sandbox:
            self._lock_down(settings or {})

    def _manifests(self) -> list[tuple[str, mf.Manifest]]:
        if is_sharded(self.path):
            out = []
            for d in shards(self.path):
                try:
                    out.append((f"{d.name}/", mf.read(d)))
                except mf.ManifestError as e:
                    raise ArchiveError(f"shard {d.name}: {e}") from None
            return out
        try:
            return [("", mf.read(self.path))]
        except mf.ManifestError as e:
            if not self.path.exists():
                raise ArchiveError(
                    f"no archive at {self.path} (create one with `budgetscope ingest FILE "
                    f"--archive {self.path}` or `budgetscope collect --archive {self.path}`)"
                ) from None
            raise ArchiveError(str(e)) from None

    def _choose(self, since_ns, until_ns) -> dict[str, list]:
        """The segments to read, a table's in one list (paths relative to the root), and per shard in
        `self._by_group` (a re-derivation only ever drops rows of its own shard)."""
        lo = None if since_ns is None else since_ns - WINDOW_MARGIN_NS
        hi = None if until_ns is None else until_ns + WINDOW_MARGIN_NS
        out: dict[str, list] = {t: [] for t in mf.TABLES}
        self._by_group = []
        for prefix, m in self._groups:
            mine = {t: m.files(t, lo, hi) for t in mf.TABLES}
            mine["requests"] = m.files("requests", since_ns, until_ns)
            if prefix:
                mine = {t: [replace(x, path=prefix + x.path) for x in segs] for t, segs in mine.items()}
            self._by_group.append(mine)
            for t, segs in mine.items():
                out[t] += segs
        return out

    def _create_views(self) -> None:
        r, s = self.path, self._segments
        views = {
            "spans": _scan(r, s["spans"], schema.SPANS),
            "requests": self._requests_view(),
            "ingest_batches": _scan(r, s["ingest_batches"], schema.INGEST_BATCHES),
            "gpu_samples": _scan(r, s["gpu_samples"], schema.GPU_SAMPLES),
            "server_metrics": _scan(r, s["server_metrics"], schema.SERVER_METRICS),
        }
        for name, sql in views.items():
            self.con.execute(f"CREATE VIEW {name} AS {sql}")
        self.con.execute(schema.ENGINE_STEPS_VIEW)

    def _requests_view(self) -> str:
        """`requests` of every shard, with one row derived from all the spans of each trace split across shards
        (split_traces.py) in place of the shards' partial rows."""
        stored = self._stored_requests_view()
        if len(self._by_group) < 2:
            return stored
        sql, self.split_traces = join_split_traces(self.con, self.path, self._by_group, stored, self._derive_sql)
        return sql

    def _stored_requests_view(self) -> str:
        """`requests` as one scan of its segments, less the rows a later commit re-derived. Those are found once,
        when the reader opens (from this manifest's segments, so every query sees the same commit), and kept as
        (file, row) keys: a query then skips them with an integer anti-join, not a join on `trace_id` per query."""
        req = self._segments["requests"]
        if not req:
            return _empty(schema.REQUESTS)
        cols = ", ".join(f"r.{c.name}" for c in schema.REQUESTS.columns)
        scan = f"{requests_scan(self.path, req, row_keys=True)} r"
        index = {s.path: i for i, s in enumerate(req)}
        dead = []
        for g in self._by_group:  # a shard's deletes drop its own rows only (`_seq` counts per shard)
            hit = affected_segments(g["requests"], g["requests_deletes"])
            if not hit:
                continue
            to_full = "[" + ", ".join(str(index[s.path]) for s in hit) + "]"
            reach = [
                d for d in g["requests_deletes"] if any(d.min_ns <= r.max_ns and d.max_ns >= r.min_ns for r in hit)
            ]
            dead.append(f"""SELECT ({to_full}[r.file_index::BIGINT + 1]::BIGINT << 32) | r.file_row_number AS k
            FROM read_parquet({sql_list(self.path, hit)}, hive_partitioning = false) r
            JOIN (SELECT trace_id, max(_seq) AS _seq FROM read_parquet({sql_list(self.path, reach)},
                  hive_partitioning = false) GROUP BY trace_id) d ON d.trace_id = r.trace_id
            WHERE r._seq < d._seq""")
        if not dead:
            return f"SELECT {cols} FROM {scan}"
        self.con.execute(f"CREATE SCHEMA IF NOT EXISTS {DEAD_TABLE.split('.')[0]}")
        self.con.execute(f"CREATE TABLE {DEAD_TABLE} AS {' UNION ALL '.join(dead)}")
        (n,) = self.con.execute(f"SELECT count(*) FROM {DEAD_TABLE}").fetchone()
        if not n:
            return f"SELECT {cols} FROM {scan}"
        return f"SELECT {cols} FROM {scan} ANTI JOIN {DEAD_TABLE} x ON {ROW_KEY} = x.k"

    def _lock_down(self, settings: dict) -> None:
        """Only the committed segments may be read; nothing may be written or loaded (`budgetscope query`)."""
        for name, value in settings.items():
            self.con.execute(f"SET {name} = ?", [value])
        files = [str(self.path / seg.path) for segs in self._segments.values() for seg in segs]
        self.con.execute("SET allowed_paths = ?", [files])
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET lock_configuration = true")

    # -- the reading API --------------------------------------------------------------------------------------
    def __enter__(self) -> ArchiveReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    def stale(self) -> bool:
        """True once a segment this reader reads is gone (a newer commit replaced it, and its grace passed)."""
        return any(not (self.path / seg.path).exists() for segs in self._segments.values() for seg in segs)

    def files(self, table: str) -> list[Path]:
        """Absolute paths of the committed segments of `table` (for any Parquet reader)."""
        return [self.path / s.path for s in self._segments[table]]

    def lazy(self, table: str):
        """A stored table as a polars LazyFrame over its committed segments (`requests` with re-derived rows
        already dropped). Needs polars (`pip install 'budgetscope[polars]'`)."""
        pl = polars()
        tables = {t.name: t for t in schema.PUBLIC if t.kind == "table"}
        if table not in tables:
            raise ArchiveError(f"no stored table {table!r} (one of {', '.join(tables)})")
        segs = self._segments[table]
        if not segs:
            return self.con.sql(_empty(tables[table])).pl().lazy()
        cols = [c.name for c in tables[table].columns]
        if table == "requests" and self.split_traces:  # rows derived at read time live in this connection
            return self.con.sql("SELECT * FROM requests").pl().lazy()
        if table != "requests":
            return pl.scan_parquet([str(p) for p in self.files(table)], hive_partitioning=False).select(cols)
        # by the table's schema: a segment written before a column was added reads it as NULL (requests_scan)
        scan = {
            "hive_partitioning": False,
            "schema": _polars_schema(schema.REQUESTS, pl),
            "missing_columns": "insert",
            "extra_columns": "ignore",
        }
        if not self._segments["requests_deletes"]:
            return pl.scan_parquet([str(p) for p in self.files(table)], **scan).select(cols)
        parts = []
        for g in self._by_group:  # a shard's deletes drop its own rows only
            if not g["requests"]:
                continue
            lf = pl.scan_parquet([str(self.path / s.path) for s in g["requests"]], **scan)
            if g["requests_deletes"]:
                dels = (
                    pl.scan_parquet([str(self.path / s.path) for s in g["requests_deletes"]], hive_partitioning=False)
                    .group_by("trace_id")
                    .agg(pl.col("_seq").max().alias("_del_seq"))
                )
                lf = lf.join(dels, on="trace_id", how="left").filter(
                    pl.col("_del_seq").is_null() | (pl.col("_seq") >= pl.col("_del_seq"))
                )
            parts.append(lf.select(cols))
        return pl.concat(parts)

    def pending_traces(self) -> int:
        """Always 0: a commit publishes spans only with their traces' `requests` rows."""
        return 0


def _polars_schema(table: schema.Table, pl) -> dict:
    """The stored columns of `table` (and `_seq`) as a polars schema, for scans of segments of several ages."""
    types = {
        "VARCHAR": pl.String,
        "BIGINT": pl.Int64,
        "INTEGER": pl.Int32,
        "DOUBLE": pl.Float64,
        "BOOLEAN": pl.Boolean,
        "DOUBLE[]": pl.List(pl.Float64),
        "VARCHAR[]": pl.List(pl.String),
    }
    return {c.name: types[c.type] for c in table.columns} | {"_seq": pl.Int64}


def committed_ns(reader) -> int | None:
    """When the commit `reader` reads was made (its manifest's `committed_ns`); None for a reader without one (a
    single-file archive) or a manifest written before the field."""
    manifest = getattr(reader, "manifest", None)
    return (manifest.committed_ns or None) if manifest is not None else None


def last_commit(path: str | os.PathLike) -> int:
    """The commit a reader opened now would read (`ArchiveReader(path).manifest.seq`, without opening one): a
    folder's manifest `seq`, the sum of its shards' for a sharded root; 0 where there is none yet, or for a
    single-file archive."""
    total = 0
    for root in shards(path) if is_sharded(path) else [Path(path)]:
        try:
            total += mf.read(root).seq
        except mf.ManifestError:
            pass
    return total


def _union(groups: list[tuple[str, mf.Manifest]]) -> mf.Manifest:
    """One manifest standing for the shards' (paths from the root): its `seq` grows whenever a shard commits."""
    return mf.Manifest(
        seq=sum(m.seq for _, m in groups),
        committed_ns=max(m.committed_ns for _, m in groups),
        segments=tuple(replace(s, path=p + s.path) for p, m in groups for s in m.segments),
        created_ns=min(m.created_ns for _, m in groups),
    )
