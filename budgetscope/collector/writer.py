"""`ArchiveWriter`: the two threads that drain the collector's queue into its `Archive`.

The acceptor takes groups of queued requests (every request queued while it was busy, or within the linger)
and answers at once each batch the archive accepts from its spool alone (`Lander.accept`: decoded by the C
decoder, written and fsynced). The lander owns the archive's working set: it lands the accepted batches in large
groups, derives and publishes about once a second, and ingests the batches `accept` did not take (which may be
rejected), answering those after `ingest` returned. Landing and publishing no longer stop acknowledgements.
"""

from __future__ import annotations

import errno
import logging
import os
import queue as queues
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from budgetscope.archive.directory import SPOOL_DIR
from budgetscope.archive.errors import ArchiveError
from budgetscope.archive.manifest import WRITER_DIR
from budgetscope.archive.protocol import Writer
from budgetscope.archive.spool import RawBatch, Spool
from budgetscope.collector.endpoint import SCRAPE_FORMAT
from budgetscope.collector.pending import Outcome, PendingQueue, Ticket
from budgetscope.ingest import otlp_fast
from budgetscope.ingest.lander import IngestReport
from budgetscope.opener import Archive
from budgetscope.sources.prometheus import PrometheusError
from budgetscope.sources.server_metrics import land_scrape

log = logging.getLogger("budgetscope.collector")


@dataclass(slots=True)
class CollectorStats:
    """Counts since the collector started. `batches` are export requests (one OTLP message each)."""

    # Every request that reached the writer (`batches`) ends in exactly one of landed, already stored, rejected,
    # failed or, at exit, spooled (acknowledged, not yet published): at exit they add up to `batches`.
    batches: int = 0  # requests that reached the writer
    batches_landed: int = 0  # new in the archive (a folder archive's: published, in a commit readers see)
    batches_already_stored: int = 0  # identical bytes had landed before, or came twice in one group: success
    batches_rejected: int = 0  # not OTLP / a bad span: answered 400 / INVALID_ARGUMENT
    batches_failed: int = 0  # the archive failed: answered 503 / UNAVAILABLE
    refused_busy: int = 0  # pending bytes at their limit: answered 429 / RESOURCE_EXHAUSTED
    refused_closed: int = 0  # arrived while shutting down: answered 503 / UNAVAILABLE
    spans: int = 0  # spans new to the archive in the landed batches
    recovered_batches: int = 0  # batches an earlier collector had acknowledged but not published, landed at start
    recovered_spans: int = 0  # the spans new to the archive in them
    spooled_batches: int = 0  # at exit: acknowledged batches that could not be published, kept in the spool
    spooled_spans: int | None = 0  # the spans in them (None: not all countable)
    requests_derived: int = 0  # `requests` rows (re)derived
    ingests: int = 0  # Archive.ingest calls (groups)
    ingest_ns: int = 0  # time spent inside them
    last_commit_ns: int = 0  # monotonic ns of the archive's last commit (spans landed or requests derived)
    started_ns: int = field(default_factory=time.monotonic_ns)

    def summary(self) -> str:
        """One line for the end of `budgetscope collect`."""
        secs = (time.monotonic_ns() - self.started_ns) / 1e9
        refused = self.refused_busy + self.refused_closed
        recovered = (
            f"; landed at start: {self.recovered_batches:,} batches ({self.recovered_spans:,} spans) an "
            "earlier collector had acknowledged"
            if self.recovered_batches
            else ""
        )
        spooled = f", {self.spooled_batches:,} in the spool" if self.spooled_batches else ""
        return (
            f"{self.batches:,} batches ({self.batches_landed:,} landed, {self.batches_already_stored:,} "
            f"already stored, {self.batches_rejected:,} rejected, {self.batches_failed:,} failed{spooled}), "
            f"{self.spans:,} spans, {self.requests_derived:,} requests derived in {self.ingests:,} ingests "
            f"over {secs:,.1f} s; {refused:,} refused (busy or closing){recovered}"
        )

    def spool_note(self, archive: str) -> str | None:
        """One line when acknowledged batches could not be published before exit (a full disk), else None."""
        if not self.spooled_batches:
            return None
        spans = "spans uncounted" if self.spooled_spans is None else f"{self.spooled_spans:,} spans"
        return (
            f"{self.spooled_batches:,} acknowledged batches ({spans}) wait in {archive}/_writer/spool, "
            "unseen by readers until the next writer to open the archive (collect, ingest, expire) lands them"
        )

    def add(self, rep: IngestReport, num_tickets: int, num_rejected: int, landed: bool = True) -> None:
        """Count an ingest's report; `landed=False` leaves its landed batches and spans to be counted when
        they are published (a folder archive's, `ArchiveWriter._sync_counts`)."""
        self.batches += num_tickets
        self.batches_already_stored += rep.batches_already_ingested
        self.batches_rejected += num_rejected
        self.requests_derived += rep.requests_derived
        if landed:
            self.batches_landed += rep.batches_landed
            self.spans += rep.spans_inserted
        self.last_commit_ns = time.monotonic_ns()


DERIVE_EVERY_S = 1.0
REOPEN_EVERY_S = 1.0  # while the archive cannot be written (a full disk): how often reopening is tried
LAND_EVERY_SPANS = 65_536
"""Batches acknowledged on the spool alone (`Lander.accept`) are landed in one ingest once this many spans
wait, and before every derivation: landing costs less a span in large groups."""


_STOP = object()  # the acceptor is done: the lander finishes and closes the archive
_LAND = object()  # enough accepted spans wait: land them


class ArchiveWriter:
    """Owns the archive (its DuckDB connection is used by the lander thread alone) and drains the queue."""

    def __init__(
        self,
        path: Path,
        queue: PendingQueue,
        linger_s: float,
        max_group_bytes: int,
        gap_s: float,
        max_deferred_bytes: int = 256 << 20,
        max_deferred_spans: int = 160_000,
        retention_ns: int | None = None,
        reader_grace_s: float | None = None,
        on_publish=None,
        after_commit=None,
    ):
        """`on_publish(con, manifest)`: after each commit, on the lander thread (`DirectoryArchive`);
        `after_commit()`: after each derivation, published or not (the live SLIs count what has settled)."""
        self.path = path
        self.queue = queue
        self.linger_s = linger_s
        self.gap_s = gap_s
        self.max_group_bytes = max_group_bytes
        # passed to the archive: its compactor expires older hours; the readers' grace it keeps (None: as it is)
        self.archive_options = {
            "retention_ns": retention_ns,
            "reader_grace_s": reader_grace_s,
            "on_publish": on_publish,
        }
        self.after_commit = after_commit
        # the decoded columns of acknowledged batches, waiting to land or landing, and their spans: past either,
        # accepting waits
        self.max_deferred_bytes = max_deferred_bytes
        self.max_deferred_spans = max_deferred_spans
        self._landed = threading.Event()  # set by the lander after each landing of accepted batches
        self.stats = CollectorStats()
        self.error: str | None = None  # set when the archive cannot be (re)opened: the writer is broken
        self.broken: str | None = None  # the same, as each 503 says it: a short reason, no path
        self.unavailable: str | None = None  # set while an I/O failure (a full disk) keeps it closed: 503s
        self._failure = "the archive failed to store this batch"  # what a 503 says otherwise (the last reason)
        self._retry_at = 0.0
        self._archive: Writer | None = None
        self._counts_published = False  # a folder archive's landed batches are counted when published
        self._seen = (0, 0, 0)  # its published batches, their spans, copies skipped: as last counted
        self._opened = threading.Event()
        self._listening = threading.Event()  # the receivers serve (or failed to): recovery may take the CPU
        self._lock = threading.Lock()  # guards `stats` for readers on other threads
        self._archive_lock = threading.Lock()  # `accept` is never called on an archive being reopened
        self._slow: queues.Queue = queues.Queue()  # groups for `ingest`, _LAND, _STOP: acceptor -> lander
        # a _LAND waits in `_slow`: one landing takes every accepted batch, so one queued is enough (the acceptor
        # asked for one after each group, and every 0.1 s while it waited: a derivation's second left a row of
        # small landings behind it, each with a landing's fixed cost)
        self._land_queued = False
        self._thread = threading.Thread(target=self._run, name="budgetscope-archive-writer", daemon=True)
        self._acceptor = threading.Thread(target=self._accept_loop, name="budgetscope-acceptor", daemon=True)

    def start(self) -> None:
        """Open the archive on the writer thread; raise ArchiveError (one line) if it cannot be opened."""
        self._thread.start()
        self._opened.wait()
        if self._archive is None:
            self._thread.join()
            raise ArchiveError(self.error or f"cannot open {self.path}")
        self._acceptor.start()

    def listening(self) -> None:
        """The receivers serve, or will not: land what an earlier collector left in the spool now (it would
        otherwise compete for the CPU with starting them)."""
        self._listening.set()

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the writer to drain a closed queue and close the archive; True if it finished."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._acceptor.join(timeout_s)
        self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self._thread.is_alive()

    def snapshot(self) -> CollectorStats:
        with self._lock:
            snap = CollectorStats(**{f: getattr(self.stats, f) for f in CollectorStats.__slots__})
        snap.refused_busy, snap.refused_closed = self.queue.refused_busy, self.queue.refused_closed
        return snap

    # -- the acceptor thread ---------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        try:
            while True:
                group = self.queue.take(self.linger_s, self.max_group_bytes, gap_s=self.gap_s)
                if not group:  # [] once the queue is closed and drained
                    break
                self._wait_for_lander()
                rest = self._accept_group(group)
                if rest:
                    self._slow.put(rest)
        finally:
            self._slow.put(_STOP)

    def _wait_for_lander(self) -> None:
        """Back-pressure: while acknowledged batches not yet landed hold `max_deferred_spans` spans or
        `max_deferred_bytes` of columns, take no more from the queue (which fills, and receivers answer busy)."""
        while self._thread.is_alive() and self._over_deferred():
            self._landed.clear()
            self._ask_to_land()
            self._landed.wait(0.1)

    def _accept_group(self, group: list[Ticket]) -> list[Ticket]:
        """Answer the tickets whose batches the archive accepts from its spool; the others, for the lander."""
        with self._archive_lock:
            archive = self._archive
            if archive is None or archive.single_file:  # broken, or a .duckdb file: everything through ingest
                return group
            batches, firsts = _batches(group)
            try:
                accepted = archive.lander.accept(batches)
            except Exception as e:  # noqa: BLE001 - the lander's ingest answers them instead
                log.error(
                    "spooling %d batches failed: %s", len(batches), (str(e).splitlines() or [type(e).__name__])[0]
                )
                return group
            waiting = archive.lander.deferred_spans
        rest = []
        for b, ok in zip(batches, accepted):
            tickets = firsts[b.position]
            if not ok:
                rest += tickets
                continue
            with self._lock:
                self.stats.batches += len(tickets)
                self.stats.batches_already_stored += len(tickets) - 1  # copies in one group: stored once
            for t in tickets:  # the bytes are free before the answer goes: whoever sees it sees them free
                self.queue.release(t.reserved)
                t.resolve(Outcome.LANDED)
        if waiting >= LAND_EVERY_SPANS:
            self._ask_to_land()
        return rest

    def _ask_to_land(self) -> None:
        """Have the lander land what was accepted, unless it is asked already. Cleared before the landing takes
        the batches: those accepted after it are taken by it or ask again."""
        if not self._land_queued:
            self._land_queued = True
            self._slow.put(_LAND)

    # -- the lander thread -----------------------------------------------------------------------------------
    def _run(self) -> None:
        try:  # what an earlier collector left in the spool lands below, once the receivers listen
            self._archive = Archive(self.path, durable=True, recover=False, **self.archive_options)
        except ArchiveError as e:
            self.error = str(e)
        except Exception as e:  # noqa: BLE001 - I/O at start (a full disk): one line, not a dead thread
            self.error = f"cannot open {self.path}: {(str(e).splitlines() or [type(e).__name__])[0]}"
        finally:
            self._opened.set()
        if self._archive is None:
            return
        self._listening.wait()
        self._recover(self._archive)
        # Groups land with derive=False (acknowledged once their spans are committed; the traces they touch
        # are recorded as pending in the same transaction), and `requests` rows are derived when the queue
        # is idle or every DERIVE_EVERY_S: deriving costs about as much as landing a group.
        last_derive = time.monotonic()
        landed_before = 0  # spans landed by the last commit
        try:
            while True:
                wait = max(0.0, DERIVE_EVERY_S - (time.monotonic() - last_derive))
                try:
                    item = self._slow.get(timeout=wait)
                except queues.Empty:
                    item = None
                if item is _STOP:
                    break
                if item is _LAND:
                    self._land_queued = False
                    self._land_deferred()
                elif item is not None:
                    self._ingest(item)
                if item is None or time.monotonic() - last_derive >= DERIVE_EVERY_S:
                    started = time.monotonic()
                    self._derive()
                    # A commit of a quiet stream is mostly fixed cost: the next is due a second after this one
                    # began (an export waits about a second plus one commit to be read). One of a busy stream
                    # waits a whole second after its end: fewer commits, less of their fixed cost.
                    with self._lock:
                        spans = self.stats.spans
                    busy = spans - landed_before >= LAND_EVERY_SPANS
                    last_derive, landed_before = time.monotonic() if busy else started, spans
        finally:
            self._finish()

    def _finish(self) -> None:
        """Publish what is left and close the archive; count what could not be published (a full disk): it
        waits in the spool for the next writer."""
        if self._archive is not None:
            self._derive()
        archive, self._archive = self._archive, None
        if archive is not None:
            try:
                archive.close()
            except Exception as e:  # noqa: BLE001 - what was acknowledged is in the spool; say so below
                log.error("closing the archive failed: %s", (str(e).splitlines() or [type(e).__name__])[0])
            self._sync_counts(archive)
        batches, spans = spooled(self.path)
        with self._lock:
            self.stats.spooled_batches, self.stats.spooled_spans = batches, spans

    def _recover(self, archive) -> None:
        """Land and publish what an earlier collector acknowledged but had not published (after kill -9), while
        the receivers already listen and the acceptor already answers (into newer spool files): a restart
        listens without waiting for it. Counted apart: this collector did not receive it (what a reopened
        archive lands from the spool is this one's)."""
        self._counts_published = not archive.single_file
        if not self._counts_published:
            return
        try:
            derived = archive.recover()
        except Exception as e:  # noqa: BLE001 - still in the spool: a reopened archive lands it
            log.error(
                "landing what the spool holds failed (reopening): %s", (str(e).splitlines() or [type(e).__name__])[0]
            )
            self._reopen()
            return
        self._seen = (archive.recovered[0], archive.recovered[1], 0)  # this collector's own are counted after it
        with self._lock:
            self.stats.recovered_batches, self.stats.recovered_spans = archive.recovered
            self.stats.requests_derived += derived
        self._sync_counts(archive)

    def _sync_counts(self, archive) -> None:
        """Count what a folder archive published since the last look (a landed batch and its spans are counted
        once a commit has published them: then readers see them) and the copies it skipped when landing."""
        if not self._counts_published or archive is None:
            return
        now = (archive.published_batches, archive.published_spans, archive.lander.copies_landed)
        with self._lock:
            self.stats.batches_landed += now[0] - self._seen[0]
            self.stats.spans += now[1] - self._seen[1]
            self.stats.batches_already_stored += now[2] - self._seen[2]
        self._seen = now

    def _derive(self) -> None:
        if self._archive is None:
            self._retry_open()  # a quiet stream still gets its spool landed once the disk has room again
            return
        self._land_deferred()
        try:
            n, _ = self._archive.commit(count_orphans=False)
        except Exception as e:  # noqa: BLE001 - the spans are safe; the next derive retries
            log.error("deriving requests failed (will retry): %s", (str(e).splitlines() or [type(e).__name__])[0])
            self._reopen()
            return
        self._sync_counts(self._archive)
        with self._lock:
            self.stats.requests_derived += n
            self.stats.last_commit_ns = time.monotonic_ns()
        if self.after_commit is not None:
            self.after_commit()

    def _land_deferred(self) -> None:
        if not self._waiting_spans():
            return
        t0 = time.perf_counter_ns()
        try:
            rep = self._archive.lander.land_deferred()
            self._landed.set()
        except Exception as e:  # noqa: BLE001 - acknowledged and spooled: a reopened archive lands them
            log.error(
                "landing acknowledged batches failed (the spool keeps them; reopening): %s",
                (str(e).splitlines() or [type(e).__name__])[0],
            )
            self._reopen()
            return
        finally:
            self._count_ingest(t0)
        for r in rep.rejected if rep is not None else ():  # only if the C decoder and the reference one disagree
            log.error("an acknowledged batch was rejected when it landed: %s", r)
        if rep is not None and rep.rejected:
            with self._lock:  # counted among the rejected: every batch in one category
                self.stats.batches_rejected += len(rep.rejected)

    def _waiting_spans(self) -> int:
        """Spans the open archive's lander accepted that no landing has taken yet."""
        archive = self._archive
        return 0 if archive is None else archive.lander.deferred_spans

    def _over_deferred(self) -> bool:
        """Whether the batches accepted and not landed (waiting, or being landed) reach either limit."""
        archive = self._archive
        if archive is None:
            return False
        lander = archive.lander
        return lander.held_spans >= self.max_deferred_spans or lander.held_bytes >= self.max_deferred_bytes

    def _ingest(self, group: list[Ticket]) -> None:
        scrapes = [t for t in group if t.format == SCRAPE_FORMAT]
        if scrapes:
            self._land_scrapes(scrapes)
            group = [t for t in group if t.format != SCRAPE_FORMAT]
            if not group:
                return
        batches, firsts = _batches(group)
        for rep, landed in self._land(batches):
            rejected = {r.position: r.error for r in rep.rejected}
            num_rejected = 0
            for b in landed:
                tickets = firsts[b.position]
                if b.position in rejected:
                    num_rejected += len(tickets)
                    log.warning("rejected %s %s: %s", b.origin, b.position, rejected[b.position])
                for t in tickets:
                    self.queue.release(t.reserved)
                    if b.position in rejected:
                        t.resolve(Outcome.REJECTED, rejected[b.position])
                    else:
                        t.resolve(Outcome.LANDED)
            # copies in one group share their batch: the first counts as it, the others as already stored
            copies = sum(len(firsts[b.position]) - 1 for b in landed if b.position not in rejected)
            with self._lock:
                self.stats.add(
                    rep, sum(len(firsts[b.position]) for b in landed), num_rejected, landed=not self._counts_published
                )
                self.stats.batches_already_stored += copies
        for t in group:
            if t.outcome is None:  # the archive failed on it
                self.queue.release(t.reserved)
                with self._lock:
                    self.stats.batches += 1
                    self.stats.batches_failed += 1
                t.resolve(Outcome.FAILED, self.broken or self.unavailable or self._failure)

    def _land_scrapes(self, tickets: list[Ticket]) -> None:
        """Scrapes sent by `budgetscope scrape` or `import` (collector/endpoint.py): each landed in
        `server_metrics` and committed before it is answered (no spool: a commit is what keeps it)."""
        for t in tickets:
            self.queue.release(t.reserved)
            outcome, error = Outcome.FAILED, self.error or self.unavailable or "the archive failed to store this scrape"
            if self._archive is None:
                self._retry_open()
            if self._archive is not None:
                try:
                    land_scrape(self._archive, t.payload)
                    outcome, error = Outcome.LANDED, ""
                except (PrometheusError, ValueError) as e:
                    outcome, error = Outcome.REJECTED, str(e)
                except Exception as e:  # noqa: BLE001 - the archive failed: answered 503, retried by the sender
                    log.error("landing a scrape failed: %s", (str(e).splitlines() or [type(e).__name__])[0])
                    self._reopen()
            with self._lock:
                self.stats.batches += 1
                self.stats.batches_rejected += outcome is Outcome.REJECTED
                self.stats.batches_failed += outcome is Outcome.FAILED
            self._sync_counts(self._archive)
            t.resolve(outcome, error)

    def _land(self, batches: list[RawBatch]) -> list[tuple[IngestReport, list[RawBatch]]]:
        """(report, the batches it covers) for what the archive took. If the group fails, each batch is tried
        alone on a fresh connection, so that one batch that breaks the writer cannot fail its whole group."""
        rep = self._try_ingest(batches)
        if rep is not None:
            return [(rep, batches)]
        if len(batches) == 1:
            return []
        return [(rep, [b]) for b in batches if (rep := self._try_ingest([b])) is not None]

    def _try_ingest(self, batches: list[RawBatch]) -> IngestReport | None:
        if self._archive is None:
            self._retry_open()
        if self._archive is None:
            return None
        t0 = time.perf_counter_ns()
        try:
            return self._archive.ingest(batches, derive=False)
        except Exception as e:  # noqa: BLE001 - any archive failure must still answer the waiting clients
            what = f"{batches[0].origin} {batches[0].position}" if len(batches) == 1 else f"{len(batches)} batches"
            log.error("archive ingest of %s failed: %s", what, (str(e).splitlines() or [type(e).__name__])[0])
            self._failure = f"the archive failed to store this batch ({public_reason(e)})"
            self._reopen()
            return None
        finally:
            self._count_ingest(t0)

    def _count_ingest(self, t0: int) -> None:
        with self._lock:
            self.stats.ingests += 1
            self.stats.ingest_ns += time.perf_counter_ns() - t0

    def _reopen(self) -> None:
        """A failed ingest may leave its connection's staging tables dirty: start from a new connection (which
        lands again what the spool holds)."""
        with self._archive_lock:
            try:
                if self._archive is not None:
                    self._archive.close()
            except Exception:  # noqa: BLE001 - closing a broken connection may fail too
                pass
            self._sync_counts(self._archive)  # a close may have published
            self._archive = None
            self._retry_at = time.monotonic() + REOPEN_EVERY_S
            try:
                self._seen = (0, 0, 0)  # what a reopened archive publishes from the spool was acknowledged here
                self._archive = self._open_and_land()
                self._sync_counts(self._archive)
                self.unavailable = None
                with self._lock:
                    self.stats.spooled_batches = self.stats.spooled_spans = 0
            except ArchiveError as e:
                self.error = f"the archive cannot be reopened: {e}"
                self.broken = f"the archive cannot be reopened ({public_reason(e)})"
                log.error("%s", self.error)
            except Exception as e:  # noqa: BLE001 - I/O (a full disk): answer 503 meanwhile, try again later
                if self.unavailable is None:  # nothing is acknowledged while it is closed: count the spool once
                    self._outage(e)

    def _open_and_land(self) -> Writer:
        """Open the archive again and land what its spool holds (what was acknowledged while it was closed),
        counting the requests that landing derives: a reopened archive's commit is this collector's work (its
        summary said "0 requests derived" after a full disk, though all of them were)."""
        archive = Archive(self.path, durable=True, recover=False, **self.archive_options)
        if archive.single_file:  # no spool: nothing to land
            return archive
        try:
            derived = archive.recover()
        except BaseException:
            archive.abandon()  # nothing opened stays open: the next try starts clean
            raise
        with self._lock:
            self.stats.requests_derived += derived
        return archive

    def _outage(self, e: Exception) -> None:
        """The archive cannot be written: say why (short: no path, no DuckDB error document; the whole reason goes
        to the log), and what acknowledged waits in the spool, in every 503."""
        batches, spans = spooled(self.path)
        with self._lock:
            self.stats.spooled_batches, self.stats.spooled_spans = batches, spans
        self.unavailable = f"the archive cannot be written ({public_reason(e)})"
        if batches:
            self.unavailable += (
                f"; {batches:,} acknowledged batches wait in its spool, unseen by readers until they land"
            )
        log.error(
            "%s; trying again every %.0f s, answering 503 meanwhile (%s)",
            self.unavailable,
            REOPEN_EVERY_S,
            (str(e).splitlines() or [type(e).__name__])[0],
        )

    def _retry_open(self) -> None:
        """After an I/O failure left no archive open (not a broken one: `error`), reopen it at most every
        REOPEN_EVERY_S; reopening lands and publishes what the spool holds."""
        if self.error is None and time.monotonic() >= self._retry_at:
            self._reopen()


_OS_REASONS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.EIO,
    errno.EMFILE,
    errno.ENOMEM,
}


def public_reason(e: BaseException) -> str:
    """Why the archive failed, as a peer may read it in a 503: the operating system's words for the error
    (`No space left on device`) when there is one, else the kind of error; never a path of this machine or
    DuckDB's error document (both go to the collector's log)."""
    if isinstance(e, OSError) and e.errno:
        return os.strerror(e.errno)
    text = str(e)
    if m := re.search(r'"errno"\s*:\s*"?(\d+)', text):  # DuckDB's IO Error carries the OS error number
        return os.strerror(int(m.group(1)))
    for code in sorted(_OS_REASONS):
        if os.strerror(code) in text:
            return os.strerror(code)
    if m := re.match(r"([A-Z][A-Za-z ]{0,40}Error):", text):  # DuckDB's kind of error ("IO Error")
        return m.group(1)
    return type(e).__name__


def _batches(group: list[Ticket]) -> tuple[list[RawBatch], dict[str, list[Ticket]]]:
    """The group's batches, and the tickets of each (by the batch's position). Identical bodies in one group
    (a retry racing its original) share one batch and one outcome."""
    # by length, then bytes: a dict keyed by the body would hash every body whole (Python's siphash: about 1 µs
    # a span over OTLP/HTTP JSON), where bodies of one length are few and compared only with each other
    same: dict[tuple[str, int], list[list[Ticket]]] = {}
    groups: list[list[Ticket]] = []  # in the order of their first ticket
    for t in group:
        kin = same.setdefault((t.format, len(t.payload)), [])
        for ts in kin:
            if ts[0].payload == t.payload:
                ts.append(t)
                break
        else:
            kin.append([t])
            groups.append(kin[-1])
    batches = [RawBatch(ts[0].payload, ts[0].format, ts[0].origin, ts[0].position) for ts in groups]
    return batches, {b.position: ts for b, ts in zip(batches, groups)}


def spooled(root: Path) -> tuple[int, int | None]:
    """(batches, spans) in the spool of the archive at `root`: acknowledged by a collector, not yet published,
    landed by the next writer to open the archive. Spans are None when the C decoder cannot count them all."""
    folder = root / WRITER_DIR / SPOOL_DIR
    held = list(Spool.read(folder)) if folder.is_dir() else []
    spans = 0
    for fmt, decode in (("otlp-json", otlp_fast.decode), ("otlp-proto", otlp_fast.decode_proto)):
        payloads = [b.payload for b in held if b.format == fmt]
        if not payloads:
            continue
        if not otlp_fast.AVAILABLE:
            return len(held), None
        _, took, left, _ = decode(payloads, list(range(len(payloads))))
        if left:
            return len(held), None
        spans += sum(took.values())
    known = all(b.format in ("otlp-json", "otlp-proto") for b in held)
    return len(held), spans if known else None
