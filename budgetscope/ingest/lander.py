"""`Lander`: decodes batches and lands them in an archive writer's working set, then has them derived.

One per writer (`budgetscope.opener.Archive` makes it). `land(batches)` is `ingest`: idempotent (a batch whose
bytes were seen before lands once) and atomic per batch (a batch with one bad span lands not at all; the good
batches of a chunk land in one transaction), with the `requests` rows of what changed derived in the same
transaction as their spans (a single file) or the same commit (a folder). `accept(batches)` is the collector's
acknowledgement from the spool alone; `land_deferred()` lands what it took.

What the decoders learn about copies (the call's span set, whether a chunk repeated a pair, since which batch
ids copies can be) stays in here: the writer only stores, and `budgetscope.derive` only derives.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from budgetscope.archive.protocol import Writer
from budgetscope.archive.spool import RawBatch
from budgetscope.derive.id_links import IdLinks
from budgetscope.derive.pending import derive_pending, orphans_sql
from budgetscope.ingest import jsonsql, otlp_fast, otlp_json, otlp_metrics, otlp_proto, staging
from budgetscope.ingest.batches import Chunk, Decoded, chunks, content_hash, decoded_chunk, prefetch
from budgetscope.ingest.rows import insert_rows
from budgetscope.ingest.spanbatch import BadBatch

DERIVE_EVERY_SPANS = 2_000_000
DERIVE_EVERY_BYTES = 256 << 20
"""A `land` call derives the `requests` rows of what it has landed each time it has landed this many more
spans, or batches of this many more bytes, and once more at the end (docs/benchmarks.md, "DERIVE_EVERY_SPANS").
Deriving holds the requests in DuckDB's hash tables, and a folder's working set lets go of what a derivation
published once it holds enough (directory.py, MEMORY_SPANS): so a file of any size keeps to about the memory of
this much; a trace whose spans straddle two derivations is derived again by the second."""
ACCEPTED_SET_PAIRS = 2_000_000
"""The collector's span set of accepted batches is replaced once it holds this many pairs (32 MB; docs/ingest.md,
"Copies of spans")."""


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


class Lander:
    """Lands batches in `writer` (a single-file `DuckDBArchive` or a folder's `DirectoryArchive`) and derives
    what they changed. Not thread-safe but for `accept`, which may run beside the rest."""

    def __init__(self, writer: Writer):
        self.writer = writer
        self.copies_landed = 0  # accepted batches found already stored when they landed (a retry's bytes)
        self._known: set[str] | None = None  # content hashes of landed batches, loaded on first landing
        self._spool_lock = threading.Lock()  # the spool and the deferred batches: `accept` runs on another thread
        self._deferred: list[Decoded] = []  # accepted (spooled) but not yet landed, decoded
        self._deferred_repeated = False  # a (trace_id, span_id) pair came twice among them (or may have)
        # The span set accepted batches are decoded with (otlp_fast.span_set), made on first use and kept across
        # landings until it holds ACCEPTED_SET_PAIRS: it holds every pair of every span landed from it, so a
        # landing none of whose pairs it had seen looks for copies only among the spans landed before it.
        self._deferred_seen = None
        self._deferred_gen = 0  # bumped when the span set is replaced
        self._covered_from: int | None = None  # the first batch id landed from the span set (None: none yet)
        self.deferred_spans = 0  # accepted, waiting for the next landing
        self.held_bytes = 0  # the columns held: waiting, and being landed
        self.held_spans = 0  # their spans: waiting, and being landed
        self._links: IdLinks | None = None  # made at the first derivation
        staging.setup(writer.con)
        jsonsql.setup(writer.con)

    # -- landing ---------------------------------------------------------------------------------------------
    def land(
        self, batches: Iterable[RawBatch], progress: Callable[[IngestReport], None] | None = None, derive: bool = True
    ) -> IngestReport:
        """Land every good batch; report the bad ones (which change nothing) and what was derived.

        `derive=False` leaves the `requests` rows of the touched traces to a later `commit()` (a long-running
        writer does that on its own schedule); the spans are durable either way (a folder writer's, when it is
        durable, because their bytes are in its spool when this returns). With `derive`, they are derived (and
        a folder's published) every DERIVE_EVERY_SPANS spans landed and at the end."""
        w = self.writer
        if w.read_only:
            w.refuse_writes()
        w.republished = 0
        if w.single_file:
            return self._ingest(batches, progress, derive, None)
        derived = [0, 0]  # rows derived, orphan stage spans: summed over the commits of the call

        def commit() -> None:
            n, orphans = self.commit()
            derived[0] += n
            derived[1] += orphans

        spool = w.spool is not None and not derive
        if spool:
            batches = list(batches)
        rep = self._ingest(batches, progress, False, commit if derive else None)
        if spool:
            bad = {(r.origin, r.position) for r in rep.rejected}
            with self._spool_lock:
                w.spool.append(b for b in batches if (b.origin, b.position) not in bad)
        if derive:
            t0 = time.perf_counter()
            commit()
            rep.requests_derived, rep.orphan_stage_spans = derived
            rep.seconds += time.perf_counter() - t0
        rep.spans_inserted -= w.republished  # found among the published spans when their traces were read back
        rep.duplicate_spans += w.republished
        return rep

    def _ingest(
        self,
        batches: Iterable[RawBatch],
        progress: Callable[[IngestReport], None] | None,
        derive: bool,
        every_part: Callable[[], None] | None,
        decoded: tuple[list[Decoded], bool] | None = None,
    ) -> IngestReport:
        """Land in the working set. `every_part` (with `derive=False`) is called instead of a derivation at each
        DERIVE_EVERY_SPANS but the end. `decoded`: land these instead of `batches` (the accepted batches,
        decoded when they were accepted), with whether the span set they were decoded with saw a pair twice."""
        con = self.writer.con
        t0 = time.perf_counter()
        report = IngestReport()
        if self._known is None:
            self._known = {h for (h,) in con.execute("SELECT content_hash FROM ingest_batches").fetchall()}
        (next_id,) = con.execute("SELECT coalesce(max(batch_id), 0) + 1 FROM ingest_batches").fetchall()[0]
        # While every span of this call comes through the C decoder, its span set tells which chunks hold no
        # copy of a span landed earlier in the call; those are checked against older spans only, if any.
        spans_seen = otlp_fast.span_set() if otlp_fast.AVAILABLE and decoded is None else None
        (stored_before,) = con.execute("SELECT EXISTS (SELECT 1 FROM spans)").fetchall()[0]
        c_only = spans_seen is not None or decoded is not None
        # accepted batches: the span set they were decoded with holds every span landed from it since
        # `_covered_from`; a call's own set, every span of the call
        if decoded is not None and self._covered_from is None:
            self._covered_from = next_id
        vouched_from = self._covered_from if decoded is not None else next_id
        parts = derived_upto = 0  # derivations made along the way, and the spans landed at the last one
        landed_bytes = 0  # batch bytes landed since the last one
        rejected_hashes: dict[str, str] = {}
        # Reading, hashing and building the next chunk overlap DuckDB's work on this one.
        # `decoded`: batches the C decoders took already (and whether their span set saw a pair twice), one chunk
        source = (
            iter([decoded_chunk(decoded[0], self._known, next_id, decoded[1])])
            if decoded is not None
            else prefetch(chunks(batches, self._known, next_id, spans_seen))
        )
        for chunk in source:
            report.batches += chunk.seen
            report.batches_already_ingested += len(chunk.copies)
            c_only = c_only and chunk.c_only
            older_than = None if not c_only or chunk.repeated else vouched_from if stored_before else 0
            if chunk.items:
                before = report.spans_inserted
                try:
                    self._land(chunk, report, rejected_hashes, older_than)
                    if decoded is None and report.spans_inserted > before:
                        # spans the accepted batches' span set never saw: the next landing of those looks for
                        # copies among everything landed before it
                        self._covered_from = None
                except BaseException:
                    self._known = None  # the chunk's hashes were marked known but did not land: reload
                    raise
                finally:
                    staging.clear(con)
            for h, origin, position in chunk.copies:  # same bytes as an earlier batch of this call, rejected
                if h in rejected_hashes:
                    report.batches_already_ingested -= 1
                    report.rejected.append(
                        Rejected(origin, position, f"same bytes as {rejected_hashes[h]}, which was rejected")
                    )
            landed_bytes += sum(len(rb.payload) for _, _, rb in chunk.items)
            if (derive or every_part) and (
                report.spans_inserted - derived_upto >= DERIVE_EVERY_SPANS or landed_bytes >= DERIVE_EVERY_BYTES
            ):
                (every_part or self._derive_part)()
                parts, derived_upto, landed_bytes = parts + 1, report.spans_inserted, 0
            report.seconds = time.perf_counter() - t0
            if progress:
                progress(report)
        if derive and parts:
            self._derive_part()
            report.requests_derived, report.orphan_stage_spans = self._touched_counts()
        elif derive:
            report.requests_derived, report.orphan_stage_spans = self.commit()
        report.seconds = time.perf_counter() - t0
        return report

    def _derive_part(self) -> None:
        """Derive the pending traces now, remembering them: the call's counts are taken over all it touched."""
        con = self.writer.con
        con.execute("CREATE TEMP TABLE IF NOT EXISTS bs_touched (trace_id VARCHAR)")
        con.execute("INSERT INTO bs_touched SELECT trace_id FROM pending_traces")
        self.commit()

    def _touched_counts(self) -> tuple[int, int]:
        """(requests rows, orphan stage spans) of the traces this call touched, derived in parts."""
        con = self.writer.con
        touched = "SELECT trace_id FROM bs_touched"
        (n,) = con.execute(f"SELECT count(*) FROM requests WHERE trace_id IN ({touched})").fetchall()[0]
        (orphans,) = con.execute(orphans_sql(f"(SELECT * FROM spans WHERE trace_id IN ({touched}))")).fetchall()[0]
        con.execute("DROP TABLE bs_touched")
        return n, orphans

    def _land(self, ch: Chunk, report: IngestReport, rejected_hashes: dict[str, str], older_than: int | None) -> None:
        """Land one chunk in one transaction: the fast paths first, then the reference path for the rest.
        `older_than`: see `jsonsql.land`."""
        con = self.writer.con
        by_id = {bid: (h, rb) for bid, h, rb in ch.items}
        first = ch.items[0][0]
        rejected: dict[int, str] = {}
        with self.writer.transaction():
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
                    batch = (
                        otlp_json.decode(otlp_json.parse(rb.payload))
                        if rb.format == "otlp-json"
                        else otlp_proto.decode(rb.payload)
                    )
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
            inserted = dict(
                con.execute("SELECT batch_id, count(*) FROM spans WHERE batch_id >= ? GROUP BY 1", [first]).fetchall()
            )
            now = time.time_ns()
            rows = []
            for bid, h, rb in ch.items:
                if bid in rejected:
                    continue
                total = staged[bid] if bid in staged else ch.expected.get(bid, 0)
                rows.append(
                    (
                        bid,
                        h,
                        rb.origin,
                        rb.position,
                        rb.format,
                        now,
                        total,
                        inserted.get(bid, 0),
                        total - inserted.get(bid, 0),
                    )
                )
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

    # -- deriving ----------------------------------------------------------------------------------------------
    def commit(self, count_orphans: bool = True) -> tuple[int, int]:
        """Land what `accept` took, derive the pending traces (a folder reads their published spans back
        first) with the traces an imported record links them to by request id (derive/id_links.py), and have the
        writer publish; (requests rows derived, orphan stage spans; 0 without `count_orphans`: the collector does
        not report them, and counting scans the scope again)."""
        w = self.writer
        self.land_deferred()
        if not w.pending_traces():
            w.after_derive()
            return 0, 0
        con, track = w.con, w.track_derivations
        links = self._links or IdLinks(con, w.published_requests, w.bring_back, w.new_spans)
        self._links = links
        w.before_derive()
        links.before()
        if not links.tracking:  # no request id met, none waits: the derivation alone (one query of `before`)
            rows, orphans = derive_pending(con, count_orphans, track)
            w.after_derive()
            return rows, orphans
        derived = "SELECT trace_id FROM bs_round"
        con.execute("CREATE OR REPLACE TEMP TABLE bs_round AS SELECT DISTINCT trace_id FROM pending_traces")
        rows, orphans = derive_pending(con, count_orphans, track)
        if links.after(derived):  # a server row whose imported record waited for it
            (again,) = con.execute(
                "SELECT count(*) FROM requests WHERE trace_id IN (SELECT trace_id FROM pending_traces) "
                "AND trace_id IN (SELECT trace_id FROM bs_round)"
            ).fetchone()
            con.execute("INSERT INTO bs_round SELECT DISTINCT trace_id FROM pending_traces")
            more, more_orphans = derive_pending(con, count_orphans, track)
            rows, orphans = rows + more - again, orphans + more_orphans
        links.kept(derived)
        con.execute("DROP TABLE bs_round")
        w.after_derive()
        return rows, orphans

    def recover(self) -> int:
        """Land and publish what a collector acknowledged but had not published (the writer's `spooled()`:
        the spool files there were when it opened); the `requests` rows derived. The opener does it unless
        asked not to; then the caller does, once (the collector, on its lander thread, while it already
        accepts: new batches go to newer spool files)."""
        w = self.writer
        spooled = w.spooled()
        if spooled is not None:
            rep = self._ingest(spooled, None, False, None)
            w.recovered = (rep.batches_landed, rep.spans_inserted)
        derived, _ = self.commit()
        w.recovered_done()
        return derived

    # -- the collector's acknowledgement ------------------------------------------------------------------------
    def accept(self, batches: list[RawBatch]) -> list[bool]:
        """The collector's fast acknowledgement (durable folder writers only): take now each batch that will
        land whatever else the archive holds — OTLP (JSON or protobuf) the C decoder takes whole: nothing in it
        can be rejected, and copies of stored spans are dropped when it lands — spool it (fsync), and keep it
        for `land_deferred()`; a flag per batch. The batches not taken need `land` to know their outcome.

        Safe to call from one thread while another lands, commits and ingests (it touches only the spool and
        the deferred list, under a lock)."""
        spool = self.writer.spool
        if spool is None or not otlp_fast.AVAILABLE:
            return [False] * len(batches)
        with self._spool_lock:
            if self._deferred_seen is None:
                self._deferred_seen = otlp_fast.span_set()
            seen, gen = self._deferred_seen, self._deferred_gen
        taken: dict[int, int] = {}  # batch index -> spans
        parts, repeated = [], False
        for fmt, decode in (("otlp-json", otlp_fast.decode), ("otlp-proto", otlp_fast.decode_proto)):
            ids = [i for i, b in enumerate(batches) if b.format == fmt]
            if ids:
                table, took, _, rep = decode([batches[i].payload for i in ids], ids, seen)
                if table is not None:
                    parts.append((table, [i for i in ids if i in took]))
                taken.update(took)
                repeated |= rep
        if not taken:
            return [False] * len(batches)
        order = sorted(taken)
        took = [batches[i] for i in order]
        index = {i: k for k, i in enumerate(order)}
        entry = Decoded(
            took,
            [content_hash(b) for b in took],
            [taken[i] for i in order],
            [(t, [index[i] for i in members]) for t, members in parts],
        )
        held = sum(t.nbytes for t, _ in parts)
        with self._spool_lock:
            views = spool.append(took, views=True)
            if views is not None:  # their bytes wait on disk: only the columns are held (and counted)
                entry.batches = [RawBatch(v, b.format, b.origin, b.position) for v, b in zip(views, took)]
            else:
                held += sum(len(b.payload) for b in took)
            self._deferred.append(entry)
            # decoded with a span set since replaced: its pairs were not checked against the others'
            self._deferred_repeated |= repeated or gen != self._deferred_gen
            self.deferred_spans += sum(entry.spans)
            self.held_spans += sum(entry.spans)
            self.held_bytes += held
        return [i in taken for i in range(len(batches))]

    def land_deferred(self) -> IngestReport | None:
        """Land what `accept` took, as it decoded it, in one landing (the fast path of a file's); None if there
        was nothing. Should it fail, the batches are still in the spool: the next writer (or a reopened one)
        lands them."""
        spool = self.writer.spool
        if spool is None:
            return None
        with self._spool_lock:  # what is spooled so far is landed below (or was already)
            entries, repeated = self._deferred, self._deferred_repeated
            self._deferred, self._deferred_repeated = [], False
            replaced = self._deferred_seen is not None and self._deferred_seen.count >= ACCEPTED_SET_PAIRS
            if replaced:  # the next `accept` makes a new one; these entries land as decoded with this one
                self._deferred_seen = None
                self._deferred_gen += 1
            # their columns stay counted until they have landed: what `accept` takes meanwhile is held beside them
            landing, landing_spans, self.deferred_spans = self.held_bytes, self.held_spans, 0
            self.writer.spool_cut = spool.rotate()
        try:
            if not entries:
                return None
            rep = self._ingest((), None, False, None, decoded=(entries, repeated))
        finally:
            del entries
            with self._spool_lock:
                self.held_bytes -= landing
                self.held_spans -= landing_spans
            if replaced:  # the new set's spans land from the next landing on
                self._covered_from = None
        self.copies_landed += rep.batches_already_ingested
        return rep
