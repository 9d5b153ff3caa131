"""`DirectoryArchive`: the writer of a directory archive (Parquet segments committed by a manifest).

The writer lands batches in a working set — a `DuckDBArchive` in memory, with all of that class's checks: idempotent batches, atomic batches, spans deduplicated, `requests` derived by the source adapters.
Each `commit()` then derives what is pending and publishes what is new as immutable Parquet segments, one
manifest commit for the lot, so readers see spans together with the requests they make (`collect`, whose
acknowledgements must survive a crash before that, writes each landed batch's bytes to a spool first: spool.py):

    new spans, batches, GPU samples, scrapes (batch_id > published_batch)  → their tables' segments
    requests rows of the traces derived since the last commit              → `requests` (tagged `_seq`)
    earlier rows those re-derivations replace                              → `requests_deletes`

A trace whose spans arrive across commits is re-derived from every span of it: spans already published but no
longer in the working set are read back from the segments of their hours first ("rehydrated").
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from budgetscope import cores, schema
from budgetscope.archive import manifest as mf
from budgetscope.archive import segments
from budgetscope.archive.compaction import Compactor
from budgetscope.archive.duckdb_archive import DuckDBArchive, one
from budgetscope.archive.errors import ArchiveError, ArchiveLocked
from budgetscope.archive.holding import Holding
from budgetscope.archive.protocol import Landing
from budgetscope.archive.reader import ArchiveReader, requests_sql
from budgetscope.archive.shards import is_sharded
from budgetscope.archive.spool import Spool

SPOOL_DIR = "spool"
MEMORY_SPANS = 2_000_000
MEMORY_BYTES = 96 << 20
"""`ingest`'s working set is emptied of published rows once it holds this many spans, or spans whose attributes
and resources come to this many bytes of JSON text (docs/benchmarks.md, "DERIVE_EVERY_SPANS")."""
BULK_BLOCK_MEMORY = 1 << 30
"""A writer that is not durable (`ingest`, `import`, `scrape`) lets DuckDB keep up to this much of its working
set's freed memory blocks for reuse (`block_allocator_memory`, at most an eighth of the machine's memory), where
DuckDB's default gives them back and faults them in anew a page at a time: an ingest of 1M vLLM classic spans
took ~700,000 page faults and ~1.7 CPU-s fewer (docs/benchmarks.md, "BULK_BLOCK_MEMORY"). What is kept is never
more than the working set once held, but DuckDB gives it back only when the archive closes: the collector, which
runs for days, keeps the default (none)."""
REHYDRATE_MARGIN_NS = mf.HOUR_NS
"""Spans of one trace are looked for within this much of the new spans' times."""


BLOCK_SETTING = "block_allocator_memory"  # DuckDB's name for it (tests fake a DuckDB without it by another)


def _keep_freed_blocks(con) -> None:
    """BULK_BLOCK_MEMORY on the working set's connection; a DuckDB before 1.5 has no such setting, and keeps its
    default."""
    # imported on use: duckdb 153 ms to import
    import duckdb

    try:
        machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # a platform that does not tell
        machine = 8 * BULK_BLOCK_MEMORY
    size = max(1 << 20, min(BULK_BLOCK_MEMORY, machine // 8))
    try:
        con.execute(f"SET {BLOCK_SETTING} = '{size >> 20}MiB'")
    except duckdb.CatalogException:  # "unrecognized configuration parameter"
        pass


_STATE_DDL = (
    "CREATE TABLE IF NOT EXISTS bs_derived (trace_id VARCHAR)",
    "CREATE TABLE IF NOT EXISTS bs_superseded (trace_id VARCHAR, arrival_ns BIGINT)",
    "CREATE TABLE IF NOT EXISTS bs_state (key VARCHAR PRIMARY KEY, value BIGINT)",
    # traces the working set let go of, with where their spans lie (start_ns from lo to hi; NULL: not known)
    "CREATE TABLE IF NOT EXISTS bs_dropped (h UBIGINT, at_ns BIGINT, lo BIGINT, hi BIGINT)",
)

_PUBLISH = {  # table -> rows new since the last commit ({w}: the last published batch id)
    "spans": f"SELECT {', '.join(c.name for c in schema.SPANS.columns)} FROM spans WHERE batch_id > {{w}}",
    "ingest_batches": "SELECT * FROM ingest_batches WHERE batch_id > {w}",
    "gpu_samples": "SELECT * FROM gpu_samples WHERE batch_id > {w}",
    "server_metrics": "SELECT * FROM server_metrics WHERE batch_id > {w}",
}


class WriterLock:
    """One writer per archive: an exclusive `flock` on `_writer/lock`, released when the process dies."""

    def __init__(self, root: Path):
        path = root / mf.WRITER_DIR / "lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(self._fd)
            raise ArchiveLocked(
                f"{root} is being written by another process (pid {holder}); "
                "an archive has one writer, and readers need no lock",
                holder,
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, str(os.getpid()).encode(), 0)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def create_archive(root: Path) -> None:
    """Make an empty directory archive at `root` (its parent must exist)."""
    if not root.parent.exists():
        raise ArchiveError(f"cannot create {root}: folder {root.parent} does not exist")
    root.mkdir(exist_ok=True)
    if any(p.name not in (mf.WRITER_DIR, mf.TMP_DIR) for p in root.iterdir()):
        raise ArchiveError(f"{root} is a folder with other files in it, not a budgetscope archive")
    mf.write(root, mf.Manifest(committed_ns=time.time_ns()))


class DirectoryArchive:
    """The one writer of a directory archive. `durable=True` spools the bytes of what `ingest(derive=False)`
    landed to `_writer/spool/` before it returns, so that it is safe before `commit()` publishes it (the
    collector acknowledges then); the next writer lands what a crashed one left in the spool."""

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        create: bool = True,
        durable: bool = False,
        holding: Holding | None = None,
        compact: bool = True,
        retention_ns: int | None = None,
        reader_grace_s: float | None = None,
        on_publish: Callable[[Any, mf.Manifest], None] | None = None,
    ):
        """`on_publish(con, manifest)`: called after each commit reached the manifest, on the writer's thread, with
        the working set (`requests` rows of the traces the commit derived: `trace_id IN (SELECT trace_id FROM
        bs_derived)`; the traces whose earlier rows it replaced: `bs_superseded`) and the new manifest (the live
        SLIs of `collect --budgets` count from it). It must not raise."""
        self.path = root = Path(root)
        if root.is_file():
            raise ArchiveError(f"{root} is a file, not an archive folder")
        if durable and holding is None:
            raise ValueError("a durable writer needs its `holding` (archive/holding.py)")
        if not mf.is_directory_archive(root):
            if is_sharded(root):
                raise ArchiveError(
                    f"{root} is a sharded archive: read it as a whole, write one shard of it "
                    "(`budgetscope collect --shard ID`)"
                )
            if not create:
                raise ArchiveError(f"no archive at {root} (create one with `budgetscope ingest FILE --archive {root}`)")
            create_archive(root)
        self.read_only = False
        self.single_file = False
        self.track_derivations = True  # what a derivation replaced, the next `after_derive` supersedes
        self.lander: Landing | None = None  # what lands and derives (budgetscope.opener sets it)
        self.retention_ns = retention_ns  # the compactor drops hours older than this (retention.py)
        self.republished = 0  # spans of the current landing dropped as copies of published ones
        self.on_publish = on_publish
        self.durable = durable
        self.holding = holding
        self.spool = None
        self.spool_cut = 0  # spool files up to this number hold only batches landed in the working set
        self._forgot_until_ns = 0  # traces dropped before this may have left `bs_dropped` (see `Holding.dropped_max`)
        # `ingest`'s: the segments this call published, which hold its own new spans alone: a pending trace is
        # looked for there only if the call let go of it (`bs_dropped`), the collector's way (`_rehydrate`)
        self._own: set[str] = set()
        self.published_batches = 0  # batches this writer published (a spool's it landed when it opened included)
        self.published_spans = 0  # the spans new to the archive that they brought
        self.recovered = (0, 0)  # (batches, spans) of those that an earlier writer had left in the spool
        self._recover_upto = 0  # the spool files up to this number were there when this writer opened
        self._lock = WriterLock(root)
        self._mlock = threading.Lock()  # the manifest, shared with the compactor thread
        self._behind: tuple[int, segments.WriteBehind] | None = None  # (top batch, the new rows' write) of a commit
        self.hot = self.compactor = None
        try:
            self.manifest = mf.read(root)
            if reader_grace_s is not None and reader_grace_s != self.manifest.grace_s:
                try:
                    grace = mf.check_grace(reader_grace_s)
                except ValueError as e:
                    raise ArchiveError(str(e)) from None
                # a setting of the archive, not a commit: the same segments under the same seq
                self.manifest = replace(self.manifest, reader_grace_s=grace)
                mf.write(root, self.manifest)
            _remove_orphans(root, self.manifest)
            self.hot = DuckDBArchive(":memory:")
            if durable:
                # DuckDB's default, a thread a core, had its workers compete with the collector's receivers and
                # acceptor for the core they need: 12-16 % more collector CPU a span on 2 cores (docs/collector.md,
                # "Throughput"); `ingest`, which has no such threads, keeps the default
                self.hot.con.execute(f"SET threads = {cores.all_but_one()}")
                self.spool = Spool(root / mf.WRITER_DIR / SPOOL_DIR)
            else:
                _keep_freed_blocks(self.hot.con)
            self.con = self.hot.con  # the working set (tests and `server_metrics.land` write through it)
            self._setup_state()
            if durable:
                self._seed_dropped()
            self.compactor = Compactor(self) if compact else None
            self._recover_upto = self.spool.rotate() if self.spool is not None else 0  # files before this open
        except BaseException:  # nothing opened stays open: a writer that failed to open (a full disk) holds no lock
            self.abandon()
            raise

    def spooled(self):
        """The batches a collector acknowledged but had not published (it crashed, or stopped while the disk was
        full): those in the spool files there were when this writer opened, for `Lander.recover` to land; None
        if there are none. A writer that keeps no spool of its own (`ingest`, `expire`) lands them too, and
        empties the spool with its next commit (then `recovered_done`)."""
        folder = self.path / mf.WRITER_DIR / SPOOL_DIR
        if self.spool is None and folder.is_dir() and any(folder.glob("*.spool")):
            self.spool = Spool(folder)
            self._recover_upto = self.spool.rotate()
        return self.spool.batches(upto=self._recover_upto) if self.spool is not None else None

    def recovered_done(self) -> None:
        """What the spool held is published and emptied: a writer that keeps no spool lets go of it."""
        if not self.durable and self.spool is not None:
            self.spool.close()
            self.spool = None

    def recover(self) -> int:
        """Land and publish what the spool holds (`Lander.recover`); the `requests` rows derived."""
        return self._landing().recover()

    def _landing(self) -> Landing:
        if self.lander is None:
            raise ArchiveError(
                f"{self.path}: this writer was opened without a lander (open it with `budgetscope.opener.Archive`)"
            )
        return self.lander

    def abandon(self) -> None:
        """Let go after a failure (a full disk, a read-only file system): close what is open, delete the files
        no commit lists (segments half-written, or written but not committed), release the lock. The last
        commit stays as it was; a durable writer's spool keeps what it acknowledged."""
        self._drop_behind()
        for part in (self.compactor, self.hot, self.spool):
            try:
                if part is self.compactor and part is not None:
                    part.close(finish=False)  # after a failure no merge is waited for
                elif part is not None:
                    part.close()
            except Exception:  # noqa: BLE001 - closing what failed may fail too; the lock goes regardless
                pass
        self.compactor = self.hot = None
        try:
            if getattr(self, "manifest", None) is not None:
                _remove_orphans(self.path, self.manifest)
        except OSError:  # a read-only file system holds no half-written file
            pass
        self._lock.release()

    # -- lifecycle -----------------------------------------------------------------------------------------
    def __enter__(self) -> DirectoryArchive:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:  # what failed would fail again: publish nothing more, leave nothing half-written
            self.abandon()

    def close(self) -> None:
        """Commit what is pending, let compaction finish (a durable writer's, the collector's: stop it at once;
        the next writer merges what is left), release the archive."""
        try:
            if self.hot is not None:
                self.commit()
        except BaseException:
            self.abandon()
            raise
        finally:
            self._drop_behind()
            if self.compactor is not None:
                self.compactor.close(finish=not self.durable)
                self.compactor = None
            if self.hot is not None:
                self.hot.close()
                self.hot = None
            if self.spool is not None:
                self.spool.close()
            self._lock.release()

    def _setup_state(self) -> None:
        con = self.hot.con
        for ddl in _STATE_DDL:
            con.execute(ddl)
        row = one(con, "SELECT value FROM bs_state WHERE key = 'published_seq'")
        m = self.manifest
        pub = m.publish_seq
        if row is None:  # a new working set: learn every batch the archive holds (idempotency, batch ids)
            batches = m.files("ingest_batches")
            if batches:
                con.execute(
                    f"INSERT INTO ingest_batches SELECT * FROM read_parquet("
                    f"{segments.sql_list(self.path, batches)}, hive_partitioning = false)"
                )
            con.execute("INSERT INTO bs_state VALUES ('published_seq', ?)", [pub])
        elif row[0] < pub:  # the last publish reached the manifest, but not the working set: finish it
            self._mark_published(pub)
        elif row[0] > pub:
            raise ArchiveError(
                f"{self.path}: the manifest (publish {pub}) is older than its writer's state "
                f"(publish {row[0]}); was manifest.json replaced?"
            )

    def _mark_published(self, seq: int) -> None:
        con = self.hot.con
        con.execute("BEGIN TRANSACTION")
        con.execute("DELETE FROM bs_derived")
        con.execute("DELETE FROM bs_superseded")
        con.execute("UPDATE bs_state SET value = ? WHERE key = 'published_seq'", [seq])
        con.execute("COMMIT")

    # -- writing (the `Writer` protocol, protocol.py) ----------------------------------------------------------
    def refuse_writes(self) -> None:
        raise ArchiveError(f"{self.path} is open read-only")

    def transaction(self):
        return self.hot.transaction()

    def ingest(self, batches, progress=None, derive: bool = True):
        """Land the batches (`Lander.land`). With `derive`, commit them: derive their requests and publish, every
        DERIVE_EVERY_SPANS spans and at the end; without, they wait in the working set for the next `commit()`
        (and, when the archive is durable, their bytes are in the spool when this returns)."""
        if not self.durable:  # what the working set let go of is remembered from here on
            self._own.clear()
            self.hot.con.execute("DELETE FROM bs_dropped")
        return self._landing().land(batches, progress, derive)

    def commit(self, count_orphans: bool = True) -> tuple[int, int]:
        """Derive the pending traces (their published spans read back first) and publish everything new in one
        manifest commit (`Lander.commit`). Returns (requests rows derived, orphan stage spans; 0 without
        `count_orphans`). A writer without a lander has landed nothing: it publishes what was written straight
        into its working set."""
        if self.lander is None:
            self.after_derive()
            return 0, 0
        try:
            return self.lander.commit(count_orphans)
        except BaseException:
            self._drop_behind()  # what it wrote for this commit is never published
            raise

    derive_pending = commit

    def publish(self) -> None:
        """Publish what was written straight into the working set (`server_metrics.land`)."""
        self.commit()

    def before_derive(self) -> None:
        """Read back the published spans of the pending traces (`_rehydrate`), then start writing the rows that
        landed since the last commit, which the derivation does not change, while it runs (`_publish` takes them)."""
        self._rehydrate()
        self._drop_behind()  # a commit that failed after starting one
        con, m = self.hot.con, self.manifest
        (top,) = one(con, "SELECT coalesce(max(batch_id), 0) FROM ingest_batches")
        if top > m.published_batch:
            queries = {t: sql.format(w=int(m.published_batch)) for t, sql in _PUBLISH.items()}
            self._behind = (top, segments.WriteBehind(con, self.path, queries, m.seq + 1))

    def _drop_behind(self) -> None:
        """Discard a write of new rows that no commit took (the derivation failed, or the writer let go)."""
        behind, self._behind = self._behind, None
        if behind is not None:
            behind[1].discard()

    def after_derive(self) -> None:
        """Publish what is new in one manifest commit, empty the spool of what it published, let compaction
        know, and let go of what the working set need not hold."""
        self._publish()
        if self.spool is not None:
            self.spool.clear(upto=self.spool_cut)  # every batch those held is in the manifest now
        if self.compactor is not None:
            self.compactor.poke()
        self._prune()

    def _rehydrate(self) -> None:
        """Bring back into the working set the published spans (and live requests rows) of pending traces
        that it may lack, so that derivation sees whole traces and supersedes the rows it replaces.

        Both look for the traces they let go of (`bs_dropped`, by hash: a collision costs a look, never a row)
        where those traces' spans lie. `ingest` empties the working set when it is full, and any pending trace
        may have spans published before the call: all are looked for in those segments, and only the traces it
        let go of in the segments it published itself (each part used to search every part before it: a cost
        that grew with the square of the parts). The collector's looks, past what `bs_dropped` remembers, for
        the traces whose new spans started before it was forgotten."""
        con, m = self.hot.con, self.manifest
        if not m.files("spans"):
            return
        new = """SELECT s.trace_id, min(s.start_ns) AS lo, max(s.end_ns) AS hi FROM spans s
            WHERE s.batch_id > ? AND s.trace_id IN (SELECT trace_id FROM pending_traces) GROUP BY s.trace_id"""
        # the traces let go of, where their spans lie is known (they were all in the working set then): read back
        # there alone, not an hour either side of its new spans (a busy hour's segments, whole, at each commit)
        dropped = """SELECT n.trace_id, min(d.lo) AS lo, max(d.hi) AS hi, bool_or(d.lo IS NULL) AS unknown
                      FROM n JOIN bs_dropped d ON d.h = hash(n.trace_id) GROUP BY n.trace_id"""
        if not self.durable:
            # `ingest` looks in the segments it published for the traces it let go of (first: a look forgets the
            # traces it looked for), and for every pending trace, within the margin of its new spans, in the
            # segments from before this call (and those compaction merged since)
            con.execute(f"CREATE OR REPLACE TEMP TABLE bs_new AS {new}", [m.published_batch])
            con.execute(
                f"CREATE OR REPLACE TEMP TABLE bs_look AS WITH n AS (SELECT * FROM bs_new), d AS ({dropped}) "
                "SELECT trace_id, lo, hi, true AS known FROM d"
            )
            self._read_back(new_spans=True, own=True)
            con.execute("CREATE OR REPLACE TEMP TABLE bs_look AS SELECT *, false AS known FROM bs_new")
            con.execute("DROP TABLE bs_new")
            self._read_back(new_spans=True, own=False)
            return
        # the collector's, for the traces it let go of (a join: the pending side is the small one); a trace it may
        # have forgotten, or seeded at opening, within the margin
        forgot = self._forgot_until_ns
        con.execute(
            f"""CREATE OR REPLACE TEMP TABLE bs_look AS WITH n AS ({new}), d AS ({dropped}),
            k AS (SELECT n.trace_id, n.lo < {forgot} OR d.trace_id IS NULL OR d.unknown AS wide,
                    n.lo AS new_lo, n.hi AS new_hi, d.lo, d.hi
                  FROM n LEFT JOIN d ON d.trace_id = n.trace_id WHERE n.lo < {forgot} OR d.trace_id IS NOT NULL)
            SELECT trace_id, CASE WHEN wide THEN new_lo ELSE lo END AS lo,
                   CASE WHEN wide THEN new_hi ELSE hi END AS hi, NOT wide AS known FROM k""",
            [m.published_batch],
        )
        self._read_back(new_spans=True)

    def bring_back(self, traces: str) -> None:
        """Read back into the working set the published spans and live `requests` rows of the traces that
        `traces` (SQL: trace_id, lo, hi: ns the spans lie within) yields, where it lacks them; for a derivation of
        traces with no new span (an imported record and its server row, derive/id_links.py)."""
        if not self.manifest.files("spans"):
            return
        self.hot.con.execute(f"CREATE OR REPLACE TEMP TABLE bs_look AS SELECT *, false AS known FROM ({traces}) t")
        self._read_back(new_spans=False)

    def new_spans(self) -> str:
        """SQL of the spans landed since the last commit (the working set's rows past the published batch)."""
        return f"SELECT * FROM spans WHERE batch_id > {int(self.manifest.published_batch)}"

    def published_requests(self, lo_ns: int | None, hi_ns: int | None) -> str | None:
        """SQL of the live published `requests` rows arriving in [lo_ns, hi_ns] (every one, given None), less the
        traces the working set holds or derived since the last commit (its rows replace theirs); None if there
        are none."""
        m = self.manifest
        req = m.files("requests", lo_ns, hi_ns)
        if not req:
            return None
        live = requests_sql(self.path, req, m.files("requests_deletes", lo_ns, hi_ns))
        return f"""SELECT * FROM ({live}) p WHERE p.trace_id NOT IN (SELECT trace_id FROM requests)
            AND p.trace_id NOT IN (SELECT trace_id FROM bs_derived)"""

    def _read_back(self, new_spans: bool, own: bool | None = None) -> None:
        """The spans and live rows of the traces in `bs_look` (trace_id, lo, hi, known), read back from the
        segments that meet [lo, hi]: where a dropped trace's spans are `known` to start, else its new spans' times
        widened by REHYDRATE_MARGIN_NS. `new_spans`: spans landed since the last commit may be copies of what is
        read back (they are dropped as duplicates). `own`: only the segments this `ingest` call published (True),
        only the others (False), or all (None)."""
        con, m = self.hot.con, self.manifest
        widen = f"CASE WHEN known THEN 0 ELSE {REHYDRATE_MARGIN_NS} END"
        (lo, hi, n, known) = one(
            con, f"SELECT min(lo - {widen}), max(hi + {widen}), count(*), bool_and(known) FROM bs_look"
        )
        if not n:
            return
        con.execute("DELETE FROM bs_dropped WHERE h IN (SELECT hash(trace_id) FROM bs_look)")  # held again

        def mine(segs: list[mf.Segment]) -> list[mf.Segment]:
            return segs if own is None else [x for x in segs if (x.path in self._own) == own]

        span_segs = mine(m.files("spans", lo, hi + 1))
        cols = ", ".join(c.name for c in schema.SPANS.columns)
        # where every trace's spans are known to start within [lo, hi], the scan skips the row groups outside it
        # (a merged hour's segment is a few row groups a minute)
        within = f" AND p.start_ns BETWEEN {lo} AND {hi}" if known else ""
        con.execute("BEGIN TRANSACTION")
        try:
            if span_segs:
                con.execute(
                    f"""INSERT INTO spans SELECT {cols} FROM read_parquet({segments.sql_list(self.path, span_segs)},
                    hive_partitioning = false) p WHERE p.trace_id IN (SELECT trace_id FROM bs_look){within}
                    AND NOT EXISTS (SELECT 1 FROM spans s WHERE s.trace_id = p.trace_id AND s.span_id = p.span_id
                                    AND s.batch_id <= ?)""",
                    [m.published_batch],
                )
                if new_spans:
                    self._drop_republished(m.published_batch)
            req = mine(m.files("requests", lo, hi + 1))
            if req:
                # a delete lies in the hour of the row it drops, so the rows' window holds their deletes
                live = requests_sql(self.path, req, m.files("requests_deletes", lo, hi + 1))
                # every live row of the trace that the working set lacks: the derivation supersedes them all
                con.execute(f"""INSERT INTO requests SELECT * FROM ({live}) r
                    WHERE r.trace_id IN (SELECT trace_id FROM bs_look) AND NOT EXISTS (SELECT 1 FROM requests w
                        WHERE w.trace_id = r.trace_id AND w.arrival_ns = r.arrival_ns)""")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def _drop_republished(self, published_batch: int) -> None:
        """New spans that were already published (the working set did not hold them when they landed) are
        duplicates: drop them and count them as such in their batches' records."""
        con = self.hot.con
        con.execute(f"""CREATE OR REPLACE TEMP TABLE bs_dups AS
            SELECT n.batch_id, n.trace_id, n.span_id FROM spans n WHERE n.batch_id > {published_batch} AND EXISTS (
              SELECT 1 FROM spans o WHERE o.batch_id <= {published_batch} AND o.trace_id = n.trace_id
              AND o.span_id = n.span_id)""")
        (dups,) = one(con, "SELECT count(*) FROM bs_dups")
        if not dups:
            return
        self.republished += dups
        con.execute("""DELETE FROM spans n USING bs_dups d
            WHERE n.batch_id = d.batch_id AND n.trace_id = d.trace_id AND n.span_id = d.span_id""")
        con.execute("""UPDATE ingest_batches b SET spans_inserted = b.spans_inserted - d.n,
            duplicate_spans = b.duplicate_spans + d.n
            FROM (SELECT batch_id, count(*) AS n FROM bs_dups GROUP BY 1) d WHERE d.batch_id = b.batch_id""")

    def _publish(self) -> None:
        con, m = self.hot.con, self.manifest
        (top,) = one(con, "SELECT coalesce(max(batch_id), 0) FROM ingest_batches")
        behind, self._behind = self._behind, None
        if behind is not None and behind[0] != top:  # more landed after it began: written again, whole
            behind[1].discard()
            behind = None
        (derived,) = one(con, "SELECT count(*) FROM bs_derived")
        if top <= m.published_batch and not derived:
            return
        batches, spans = one(
            con,
            "SELECT count(*), coalesce(sum(spans_inserted), 0) FROM ingest_batches "
            f"WHERE batch_id > {int(m.published_batch)}",
        )
        if behind is not None:
            seq, written = behind[1].seq, behind[1].result()
        else:
            seq, written = m.seq + 1, []
            for table, sql in _PUBLISH.items():
                written += segments.write(con, self.path, table, sql.format(w=int(m.published_batch)), seq)
        if derived:
            # nothing else runs now: its hours side by side on DuckDB's threads (1 in the collector, cores.py)
            (threads,) = one(con, "SELECT current_setting('threads')")
            written += segments.write(
                con,
                self.path,
                "requests",
                f"SELECT *, {seq}::BIGINT AS _seq FROM requests WHERE trace_id IN (SELECT trace_id FROM bs_derived)",
                seq,
                workers=int(threads),
            )
            written += segments.write(
                con,
                self.path,
                "requests_deletes",
                f"SELECT DISTINCT trace_id, arrival_ns, {seq}::BIGINT AS _seq FROM bs_superseded",
                seq,
            )
        added = segments.place(self.path, written)
        if not self.durable:
            self._own.update(x.path for x in added)
        with self._mlock:
            new = self.manifest.commit(added=added, published_batch=max(top, m.published_batch))
            mf.write(self.path, new)
            self.manifest = new
        self.published_batches += batches
        self.published_spans += int(spans)
        if self.on_publish is not None:
            self.on_publish(con, new)
        self._mark_published(self.manifest.publish_seq)

    def _prune(self) -> None:
        """Drop published rows from the working set: everything once it holds MEMORY_SPANS spans or MEMORY_BYTES
        (`holding.max_spans` in the collector's; a later part of a large file reads back what it needs); in the
        collector's, also the traces, samples and scrapes whose batches landed more than `hold_s` ago."""
        con = self.hot.con
        h = self.holding
        if self.durable:
            (held,) = one(con, "SELECT count(*) FROM spans")
            full = held >= h.max_spans
        else:  # a string's length is in its header: 10 ms for 300,000 spans
            (held, text) = one(
                con,
                "SELECT count(*), coalesce(sum(strlen(attributes::VARCHAR) + strlen(resource::VARCHAR)), 0) FROM spans",
            )
            full = held >= MEMORY_SPANS or text >= MEMORY_BYTES
        last = self.manifest.published_batch if full else 0
        cutoff = time.time_ns() if last else time.time_ns() - int((h.hold_s if self.durable else 0) * 1e9)
        if self.durable and not last:
            (last,) = one(con, "SELECT coalesce(max(batch_id), 0) FROM ingest_batches WHERE received_ns < ?", [cutoff])
        last = min(last, self.manifest.published_batch)
        if not last:
            return
        held = " OR ".join(
            f"EXISTS (SELECT 1 FROM {t} WHERE batch_id <= {last})" for t in ("spans", "gpu_samples", "server_metrics")
        )
        if not one(con, f"SELECT {held}")[0]:
            return
        con.execute("BEGIN TRANSACTION")
        con.execute(f"""CREATE OR REPLACE TEMP TABLE bs_old AS SELECT trace_id FROM spans GROUP BY trace_id
                        HAVING max(batch_id) <= {last}""")
        con.execute(f"""INSERT INTO bs_dropped SELECT hash(trace_id), {time.time_ns()}, min(start_ns), max(end_ns)
                        FROM spans WHERE trace_id IN (SELECT trace_id FROM bs_old) GROUP BY trace_id""")
        con.execute("DELETE FROM spans WHERE trace_id IN (SELECT trace_id FROM bs_old)")
        con.execute("DELETE FROM requests WHERE trace_id IN (SELECT trace_id FROM bs_old)")
        con.execute(f"DELETE FROM gpu_samples WHERE batch_id <= {last}")
        con.execute(f"DELETE FROM server_metrics WHERE batch_id <= {last}")
        con.execute("COMMIT")
        # frees the deleted rows' memory: the working set does not checkpoint on its own (duckdb_archive.WORKING_SET)
        con.execute("CHECKPOINT")
        if self.durable:
            self._forget_dropped()

    def _forget_dropped(self) -> None:
        """Keep the newest `holding.dropped_max` of the dropped traces (trimmed once a tenth more are held)."""
        con, most = self.hot.con, self.holding.dropped_max
        (n,) = one(con, "SELECT count(*) FROM bs_dropped")
        if n <= most * 1.1:
            return
        (until,) = one(con, f"SELECT at_ns FROM bs_dropped ORDER BY at_ns DESC LIMIT 1 OFFSET {most}")
        con.execute("DELETE FROM bs_dropped WHERE at_ns <= ?", [until])
        self._forgot_until_ns = max(self._forgot_until_ns, until)

    def _seed_dropped(self) -> None:
        """A new working set holds none of the published traces: remember those of the newest span segments
        as dropped (up to `holding.seed_spans` spans), and that any older one may have been forgotten."""
        segs = sorted(self.manifest.files("spans"), key=lambda s: s.max_ns, reverse=True)
        take, spans = [], 0
        for s in segs:
            if spans >= self.holding.seed_spans:
                break
            take.append(s)
            spans += s.rows
        now = time.time_ns()
        self._forgot_until_ns = now if len(take) < len(segs) else 0
        if take:
            # where their spans lie is not known: some may be in older segments
            self.hot.con.execute(f"""INSERT INTO bs_dropped SELECT DISTINCT hash(trace_id), {now}, NULL, NULL
                FROM read_parquet({segments.sql_list(self.path, take)}, hive_partitioning = false)""")

    # -- reading the working set ---------------------------------------------------------------------------
    def pending_traces(self) -> int:
        return self.hot.pending_traces()

    def counts(self) -> dict[str, int]:
        """Row counts of the public tables, as committed."""
        with ArchiveReader(self.path) as r:
            return r.counts()


def _remove_orphans(root: Path, m: mf.Manifest) -> None:
    """Delete segment files no commit lists (a writer died between writing and committing them), and the
    retired ones whose grace has passed."""
    segments.clear_tmp(root)
    keep = {s.path for s in m.segments} | {p for p, _ in m.retired}
    for table in mf.TABLES:
        base = root / table
        if not base.is_dir():
            continue
        for f in base.rglob("*.parquet"):
            if f.relative_to(root).as_posix() not in keep:
                f.unlink()
