"""`DuckDBArchive`: one DuckDB database holding spans, requests and what came in.

It is the single-file archive format of budgetscope 0.1 (`prod.duckdb`, still read and written), and the working
set of a directory archive's writer (in memory for `ingest`, a private file for `collect`; see directory.py).

Ingest is idempotent (a batch whose bytes were seen before lands once) and atomic per batch (a batch with one
bad span lands not at all; the good batches of a chunk land in one transaction). `requests` rows are derived
in the same transaction as the spans that change them, so a reader never sees spans without their requests.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from budgetscope.archive import schema
from budgetscope.ingest import jsonsql, otlp_fast, otlp_json, otlp_metrics, otlp_proto, staging
from budgetscope.archive.errors import ArchiveError
from budgetscope.ingest.batches import Chunk, Decoded, RawBatch, chunks, decoded_chunk, prefetch
from budgetscope.ingest.rows import insert_rows
from budgetscope.archive.tables import TableAccess, polars
from budgetscope.ingest.spanbatch import BadBatch

DERIVE_EVERY_SPANS = 2_000_000
"""An ingest call derives the `requests` rows of what it has landed each time it has landed this many more
spans, and once more at the end (docs/benchmarks.md, "DERIVE_EVERY_SPANS")."""


@dataclass(slots=True)
class Rejected:
    origin: str
    position: str
    error: str

    def __str__(self) -> str:
        return f"{self.origin}: {self.position}: {self.error}"


@dataclass(slots=True)
class IngestReport:
    batches: int = 0
    batches_landed: int = 0
    batches_already_ingested: int = 0
    rejected: list[Rejected] = field(default_factory=list)
    spans: int = 0
    spans_inserted: int = 0
    duplicate_spans: int = 0
    requests_derived: int = 0
    orphan_stage_spans: int = 0
    seconds: float = 0.0
    gpu_points: int = 0  # GPU sample points in the landed metrics batches
    gpu_points_inserted: int = 0  # of those, new to `gpu_samples`

    @property
    def spans_per_s(self) -> float:
        return self.spans / self.seconds if self.seconds else 0.0


def _check_path(path: Path, create: bool) -> None:
    if path.is_dir():
        raise ArchiveError(f"{path} is a directory, not an archive file")
    if not path.exists():
        if not create:
            raise ArchiveError(f"no archive at {path} (create one with `budgetscope ingest FILE --archive {path}`)")
        if not path.parent.exists():
            raise ArchiveError(f"cannot create {path}: folder {path.parent} does not exist")


def one(con, sql: str, params=None) -> tuple:
    """The single row of `sql` (DuckDB 2 wants every result finished before the next statement)."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0] if rows else None


def _connect(path: Path, read_only: bool, config: dict | None = None):
    import duckdb

    try:
        con = duckdb.connect(str(path), read_only=read_only, config=config or {})
    except duckdb.IOException as e:
        msg = str(e).splitlines()[0]
        if "lock" in msg.lower():
            raise ArchiveError(f"{path} is in use by another process ({msg})") from None
        raise ArchiveError(f"{path} is not a DuckDB archive ({msg})") from None
    except duckdb.Error as e:
        raise ArchiveError(f"cannot open {path}: {str(e).splitlines()[0]}") from None
    if not (config or {}).get("lock_configuration"):
        # DuckDB draws its own progress bar on a terminal during long statements; ours is the one shown.
        con.execute("SET enable_progress_bar = false")
    return con


def _over_old_file(path: Path, missing: list, sandbox: bool):
    """A connection that reads the archive file `path` (attached read-only) through views of its tables, the
    `requests` one adding the `missing` columns as NULL. Views in a database of the connection's own, not
    temporary ones: the report and the dashboard query from cursors, which do not see another's temporary views."""
    import duckdb

    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")
    try:
        con.execute(f"ATTACH '{str(path).replace(chr(39), chr(39) * 2)}' AS bs_file (READ_ONLY)")
    except duckdb.Error as e:
        con.close()
        raise ArchiveError(f"cannot open {path}: {str(e).splitlines()[0]}") from None
    nulls = "".join(f", CAST(NULL AS {c.type}) AS {c.name}" for c in missing)
    tables = con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'bs_file'").fetchall()
    for (t,) in tables:
        con.execute(f'CREATE VIEW "{t}" AS SELECT *{nulls if t == "requests" else ""} FROM bs_file.main."{t}"')
    con.execute(schema.ENGINE_STEPS_VIEW)
    if sandbox:
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    return con


def _orphans(scope: str) -> str:
    """SQL counting the stage spans in `scope` (spans of whole traces) whose parent is not there: a stage span's
    root shares its trace, so the scope holds it if it arrived."""
    return f"""
SELECT count(*) FROM {scope} s WHERE starts_with(s.name, 'stage.')
AND NOT EXISTS (SELECT 1 FROM {scope} r WHERE r.trace_id = s.trace_id AND r.span_id = s.parent_span_id)"""


class DuckDBArchive(TableAccess):
    """A budgetscope archive in one DuckDB database. Use as a context manager; `read_only=True` for reports and
    queries. The path ":memory:" gives an archive in memory."""

    def __init__(self, path: str | os.PathLike, *, read_only: bool = False, create: bool = True,
                 sandbox: bool = False, finish_pending: bool = True):
        """Open (or create) an archive. `sandbox=True` (read-only) forbids the SQL any file access."""
        self.path = Path(path)
        memory = str(path) == ":memory:"
        if not memory:
            _check_path(self.path, create and not read_only)
        is_new = memory or not self.path.exists()
        self.read_only = read_only or sandbox
        self._known: set[str] | None = None  # content hashes of landed batches, loaded on first ingest
        self.track_derivations = False  # a directory writer sets it: see `derive_pending`
        config = {"enable_external_access": False, "lock_configuration": True} if sandbox else None
        self.con = _connect(self.path, self.read_only, config)
        if is_new:
            self._create()
        self._check_format()
        self._add_new_columns(sandbox)
        if not read_only:
            staging.setup(self.con)
            jsonsql.setup(self.con)
            if finish_pending:  # a directory writer does it itself, tracking what it derives
                self.derive_pending()  # finish what a crashed writer left

    # -- lifecycle -----------------------------------------------------------------------------------------
    def __enter__(self) -> "DuckDBArchive":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    def _create(self) -> None:
        with self._transaction():
            for stmt in schema.create_statements():
                self.con.execute(stmt)
            self.con.execute("INSERT INTO budgetscope_meta VALUES ('schema_version', ?)", [str(schema.SCHEMA_VERSION)])

    def _check_format(self) -> None:
        import duckdb

        try:
            (version,) = one(self.con, "SELECT value FROM budgetscope_meta WHERE key = 'schema_version'")
        except (duckdb.Error, TypeError):
            self.con.close()
            raise ArchiveError(f"{self.path} is a DuckDB file but not a budgetscope archive") from None
        if int(version) != schema.SCHEMA_VERSION:
            self.con.close()
            raise ArchiveError(f"{self.path} has archive format {version}; this budgetscope reads {schema.SCHEMA_VERSION}")

    def _add_new_columns(self, sandbox: bool) -> None:
        """`requests` columns added after this file was written: a writable open adds them (NULL in the rows it
        holds); a read-only one leaves the file as it is and reads it through views that add them as NULL."""
        con = self.con
        (db,) = one(con, "SELECT current_database()")
        present = {n for (n,) in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = 'main' "
            "AND table_name = 'requests'", [db]).fetchall()}
        missing = schema.missing_columns(schema.REQUESTS, present)
        if not missing:
            return
        if not self.read_only:
            for c in missing:
                con.execute(f"ALTER TABLE requests ADD COLUMN {c.name} {c.type}")
            return
        con.close()
        self.con = _over_old_file(self.path, missing, sandbox)

    def _transaction(self):
        con = self.con

        class _Tx:
            def __enter__(self):
                con.execute("BEGIN TRANSACTION")

            def __exit__(self, exc_type, *_):
                con.execute("ROLLBACK" if exc_type else "COMMIT")

        return _Tx()

    # -- ingest --------------------------------------------------------------------------------------------
    def ingest(self, batches: Iterable[RawBatch], progress: Callable[[IngestReport], None] | None = None,
               derive: bool = True, every_part: Callable[[], None] | None = None,
               decoded: tuple[list[Decoded], bool] | None = None) -> IngestReport:
        """Land every good batch; report the bad ones (which change nothing) and what was derived.

        `derive=False` leaves the `requests` rows of the touched traces to a later `derive_pending()` (a
        long-running writer does that on its own schedule); the spans are durable either way. With `derive`,
        they are derived every DERIVE_EVERY_SPANS spans landed and at the end. `every_part` (with
        `derive=False`) is called instead at each of those points but the end. `decoded`: land these instead of
        `batches` (the collector's accepted batches, decoded when they were accepted), with whether the span set
        they were decoded with saw a pair twice.
        """
        if self.read_only:
            raise ArchiveError(f"{self.path} is open read-only")
        t0 = time.perf_counter()
        report = IngestReport()
        if self._known is None:
            self._known = {h for (h,) in self.con.execute("SELECT content_hash FROM ingest_batches").fetchall()}
        (next_id,) = one(self.con, "SELECT coalesce(max(batch_id), 0) + 1 FROM ingest_batches")
        # While every span of this call comes through the C decoder, its span set tells which chunks hold no
        # copy of a span landed earlier in the call; those are checked against older spans only, if any.
        spans_seen = otlp_fast.span_set() if otlp_fast.AVAILABLE and decoded is None else None
        (stored_before,) = one(self.con, "SELECT EXISTS (SELECT 1 FROM spans)")
        c_only = spans_seen is not None or decoded is not None
        parts = derived_upto = 0  # derivations made along the way, and the spans landed at the last one
        rejected_hashes: dict[str, str] = {}
        # Reading, hashing and building the next chunk overlap DuckDB's work on this one.
        # `decoded`: batches the C decoders took already (and whether their span set saw a pair twice), one chunk
        source = (iter([decoded_chunk(decoded[0], self._known, next_id, decoded[1])]) if decoded is not None
                  else prefetch(chunks(batches, self._known, next_id, spans_seen)))
        for chunk in source:
            report.batches += chunk.seen
            report.batches_already_ingested += len(chunk.copies)
            c_only = c_only and chunk.c_only
            older_than = None if not c_only or chunk.repeated else next_id if stored_before else 0
            if chunk.items:
                try:
                    self._land(chunk, report, rejected_hashes, older_than)
                except BaseException:
                    self._known = None  # the chunk's hashes were marked known but did not land: reload
                    raise
                finally:
                    staging.clear(self.con)
            for h, origin, position in chunk.copies:  # same bytes as an earlier batch of this call, rejected
                if h in rejected_hashes:
                    report.batches_already_ingested -= 1
                    report.rejected.append(Rejected(origin, position,
                                                    f"same bytes as {rejected_hashes[h]}, which was rejected"))
            if (derive or every_part) and report.spans_inserted - derived_upto >= DERIVE_EVERY_SPANS:
                (every_part or self._derive_part)()
                parts, derived_upto = parts + 1, report.spans_inserted
            report.seconds = time.perf_counter() - t0
            if progress:
                progress(report)
        if derive and parts:
            self._derive_part()
            report.requests_derived, report.orphan_stage_spans = self._touched_counts()
        elif derive:
            report.requests_derived, report.orphan_stage_spans = self.derive_pending()
        report.seconds = time.perf_counter() - t0
        return report

    def _derive_part(self) -> None:
        """Derive the pending traces now, remembering them: the call's counts are taken over all it touched."""
        self.con.execute("CREATE TEMP TABLE IF NOT EXISTS bs_touched (trace_id VARCHAR)")
        self.con.execute("INSERT INTO bs_touched SELECT trace_id FROM pending_traces")
        self.derive_pending()

    def _touched_counts(self) -> tuple[int, int]:
        """(requests rows, orphan stage spans) of the traces this call touched, derived in parts."""
        touched = "SELECT trace_id FROM bs_touched"
        (n,) = one(self.con, f"SELECT count(*) FROM requests WHERE trace_id IN ({touched})")
        (orphans,) = one(self.con, _orphans(f"(SELECT * FROM spans WHERE trace_id IN ({touched}))"))
        self.con.execute("DROP TABLE bs_touched")
        return n, orphans

    def _land(self, ch: "Chunk", report: IngestReport, rejected_hashes: dict[str, str],
              older_than: int | None) -> None:
        """Land one chunk in one transaction: the fast paths first, then the reference path for the rest.
        `older_than`: see `jsonsql.land`."""
        con = self.con
        by_id = {bid: (h, rb) for bid, h, rb in ch.items}
        first = ch.items[0][0]
        rejected: dict[int, str] = {}
        with self._transaction():
            # protobuf batches the C decoder took are in `expected`, landed with the JSON ones
            reference = [bid for bid, _, rb in ch.items if rb.format != "otlp-json" and bid not in ch.expected]
            if ch.decoded is not None or ch.raw_json is not None:
                reference += jsonsql.land(con, ch.decoded, ch.raw_json, ch.expected, first, older_than)
            for bid in sorted(reference):
                rb = by_id[bid][1]
                if rb.format in otlp_metrics.FORMATS:  # GPU samples: straight to gpu_samples
                    try:
                        points = otlp_metrics.decode(rb.payload, rb.format)
                    except BadBatch as e:
                        rejected[bid] = str(e)
                        continue
                    report.gpu_points += len(points)
                    report.gpu_points_inserted += otlp_metrics.land(con, points, bid)
                    continue
                try:
                    batch = (otlp_json.decode(otlp_json.parse(rb.payload)) if rb.format == "otlp-json"
                             else otlp_proto.decode(rb.payload))
                except BadBatch as e:
                    rejected[bid] = str(e)
                    continue
                if len(batch):
                    con.register("bs_ref", batch.to_arrow(bid))
                    con.execute(f"INSERT INTO staged {staging.normalise('bs_ref')}")
                    con.unregister("bs_ref")
            rejected.update(staging.validate(con))
            insert_rows(con, "rejected", list(rejected.items()), 2)
            con.execute(staging.INSERT_NEW_DEDUP)
            staged = dict(con.execute("SELECT batch_id, count(*) FROM staged GROUP BY 1").fetchall())
            inserted = dict(con.execute(
                "SELECT batch_id, count(*) FROM spans WHERE batch_id >= ? GROUP BY 1", [first]).fetchall())
            now = time.time_ns()
            rows = []
            for bid, h, rb in ch.items:
                if bid in rejected:
                    continue
                total = staged[bid] if bid in staged else ch.expected.get(bid, 0)
                rows.append((bid, h, rb.origin, rb.position, rb.format, now, total, inserted.get(bid, 0),
                             total - inserted.get(bid, 0)))
            insert_rows(con, "ingest_batches", rows, 9)
            con.execute("INSERT INTO pending_traces SELECT DISTINCT trace_id FROM spans WHERE batch_id >= ?", [first])
        for bid, (h, rb) in by_id.items():
            if bid in rejected:
                report.rejected.append(Rejected(rb.origin, rb.position, rejected[bid]))
                rejected_hashes[h] = rb.position
                self._known.discard(h)  # a rejected batch may be sent again, fixed or not
        report.batches_landed += len(rows)
        report.spans += sum(r[6] for r in rows)
        report.spans_inserted += sum(r[7] for r in rows)
        report.duplicate_spans += sum(r[8] for r in rows)

    def publish(self) -> None:
        """Nothing to do: what a transaction committed here is what readers see (a folder archive publishes)."""

    def derive_pending(self, count_orphans: bool = True) -> tuple[int, int]:
        """(Re)derive the `requests` rows of every trace whose spans changed; return (rows, orphan stage spans;
        0 without `count_orphans`: the collector does not report them, and counting scans the scope again).

        Runs in one transaction with the removal of those traces from `pending_traces`, so a crash between an
        ingest and its derivation loses nothing: the next writer derives them.
        """
        from budgetscope.sources.requests import requests_sql

        con = self.con
        (pending,) = one(con, "SELECT count(*) FROM pending_traces")
        if not pending:
            return 0, 0
        (existing,) = one(con, "SELECT count(*) FROM requests")
        # The spans of the pending traces, read once: every adapter scans its scope, and a filtered scan of
        # a large archive per adapter cost 0.2 s for one small batch. On a fresh archive the scope is all spans.
        scope = "spans" if not existing else "bs_scope"
        with self._transaction():
            if self.track_derivations:  # what the directory writer's next commit publishes and supersedes
                con.execute("INSERT INTO bs_superseded SELECT trace_id, arrival_ns FROM requests "
                            "WHERE trace_id IN (SELECT trace_id FROM pending_traces)")
                con.execute("INSERT INTO bs_derived SELECT trace_id FROM pending_traces")
            if existing:
                con.execute("CREATE OR REPLACE TEMP TABLE bs_scope AS "
                            "SELECT * FROM spans WHERE trace_id IN (SELECT trace_id FROM pending_traces)")
                con.execute("DELETE FROM requests WHERE trace_id IN (SELECT trace_id FROM pending_traces)")
            present = {src for (src,) in con.execute(f"SELECT DISTINCT source FROM {scope}").fetchall()}
            con.execute(f"INSERT INTO requests {requests_sql(scope, present)}")
            (n,) = one(con, "SELECT count(*) FROM requests WHERE trace_id IN (SELECT trace_id FROM pending_traces)")
            (orphans,) = one(con, _orphans(scope)) if count_orphans else (0,)
            con.execute("DELETE FROM pending_traces")
            if existing:
                con.execute("DROP TABLE bs_scope")
        return n, orphans

    # -- reading -------------------------------------------------------------------------------------------
    def pending_traces(self) -> int:
        """Traces whose `requests` rows are not derived yet (only after a writer was interrupted)."""
        return one(self.con, "SELECT count(*) FROM pending_traces")[0]

    def lazy(self, table: str):
        """A table as a polars LazyFrame (read whole: a single-file archive has no files to scan)."""
        return polars().LazyFrame(self.con.table(table).pl())
