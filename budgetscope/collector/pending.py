"""`PendingQueue`: the collector's bounded hand-off from receiver threads to the one archive writer.

Memory is bounded in bytes, not in requests: a receiver reserves a request's bytes as they arrive (an HTTP
body grows its `Hold` with every read; a gRPC message is reserved whole), and they stay reserved until the
request is answered (queued, being ingested, or waiting for its reply). When the bytes that make a request
whole (a gRPC message, an HTTP body's last read, its inflated size) would pass `max_pending_bytes`, the queue
first evicts bodies that have stopped arriving (less than PROGRESS_BYTES in `stall_s`, the longest-stalled
first); if that is not enough, or the bytes are only part of a body, the receiver answers "busy" (HTTP 429 /
gRPC RESOURCE_EXHAUSTED, both retryable). A peer that declares a large body and sends nothing therefore holds
nothing, and one that stops half-way holds its bytes only until a whole request needs them. Only whole requests
evict: unfinished bodies evicting each other would keep the budget churning among themselves.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from budgetscope.schema import RECEIVED_POSITION


class Outcome(Enum):
    """What became of one export request; each receiver maps it to its protocol's status."""

    LANDED = "landed"  # durably in the archive (or had landed before: ingest is idempotent)
    REJECTED = "rejected"  # not OTLP, or a bad span: nothing of it landed; retrying will not help
    BUSY = "busy"  # refused before reading: the pending bytes are at their limit; retry later
    CLOSED = "closed"  # refused: the collector is shutting down; retry later (elsewhere)
    FAILED = "failed"  # the archive failed to write it; nothing of it landed; retry later


@dataclass(slots=True, eq=False)
class Ticket:
    """One export request on its way into the archive; `wait()` returns once its outcome is known."""

    payload: bytes
    format: str  # "otlp-proto" | "otlp-json"
    origin: str  # "otlp-http" | "otlp-grpc"
    position: str  # "request 17 from 127.0.0.1:50412": unique per request, kept in ingest_batches
    reserved: int  # bytes held in the queue's budget until the ticket is resolved
    queued_ns: int = 0
    outcome: Outcome | None = None
    error: str = ""
    rejected_spans: int = 0  # LANDED with this many spans rejected: an OTLP partial success (the router's)
    on_done: Callable[[], None] | None = None  # called once resolved, on the resolving thread (must not block)
    _done: threading.Event = field(default_factory=threading.Event)

    def resolve(self, outcome: Outcome, error: str = "") -> None:
        self.outcome, self.error = outcome, error
        self._done.set()
        if self.on_done is not None:
            self.on_done()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until resolved; True if it was."""
        return self._done.wait(timeout_s)


@dataclass(slots=True, eq=False)
class Hold:
    """The budget bytes held by one request body while it arrives; it grows with the bytes received.

    `on_evict` is called (on the evicting thread, under the queue's lock: it must only schedule) when the queue
    takes the bytes back from a body that stopped arriving; the receiver then drops its connection. `unread`
    (any thread, must not block) tells how many of its bytes have arrived but not been read yet: a body whose
    peer sent a progress's worth the collector has not read is not stalled, the collector is behind (a busy or
    CPU-starved receiver would otherwise evict, and cut off, exporters that were sending all along)."""

    on_evict: Callable[[], None] | None = None
    unread: Callable[[], int] | None = None
    nbytes: int = 0
    progress_ns: int = field(default_factory=time.monotonic_ns)  # opened, or last passed PROGRESS_BYTES more
    unmarked: int = 0  # bytes received since progress_ns
    is_evicted: bool = False


EVICT_STALLED_AFTER_S = 0.5  # a body that made no progress this long gives its bytes to a whole request
PROGRESS_BYTES = 32 << 10  # what counts as progress: a body trickling less than this per stall_s has stalled


class PendingQueue:
    """Tickets waiting for the writer, with a byte budget shared by every receiver."""

    def __init__(self, max_pending_bytes: int, stall_s: float | None = None):
        self.max_pending_bytes = max_pending_bytes
        self.stall_s = EVICT_STALLED_AFTER_S if stall_s is None else stall_s
        self.pending_bytes = 0
        self.closed = False
        self.refused_busy = 0
        self.refused_closed = 0
        self.num_evicted = 0  # stalled bodies whose bytes were taken back for another request
        self._holds: dict[int, Hold] = {}  # id → a body still arriving (the evictable reservations)
        self._positions = itertools.count(1)
        self._items: deque[Ticket] = deque()
        self._queued_bytes = 0
        self._cond = threading.Condition()

    # -- receiver side -------------------------------------------------------------------------------------
    def reserve(self, nbytes: int) -> Outcome | None:
        """Hold `nbytes` of a whole request; None on success, else BUSY or CLOSED (nothing held). Stalled bodies
        are evicted first if their bytes make the difference."""
        with self._cond:
            return self._take(nbytes, None, can_evict=True)

    def open_hold(self, on_evict: Callable[[], None] | None = None, unread: Callable[[], int] | None = None) -> Hold:
        """A reservation of 0 bytes for a body about to arrive; `grow` it as bytes come, then `settle` it."""
        hold = Hold(on_evict, unread)
        with self._cond:
            self._holds[id(hold)] = hold
        return hold

    def grow(self, hold: Hold, nbytes: int, is_last: bool = False) -> Outcome | None:
        """Add `nbytes` just received to `hold`; None on success, else BUSY or CLOSED (the hold unchanged).
        `is_last`: they make the body whole (then stalled bodies may be evicted for them). An evicted hold is
        BUSY: its connection is being dropped."""
        with self._cond:
            if hold.is_evicted:
                return Outcome.BUSY
            if refused := self._take(nbytes, hold, can_evict=is_last):
                return refused
            hold.nbytes += nbytes
            hold.unmarked += nbytes
            if is_last or hold.unmarked >= PROGRESS_BYTES:
                hold.progress_ns, hold.unmarked = time.monotonic_ns(), 0
            return None

    def settle(self, hold: Hold) -> int:
        """The body arrived whole: `hold` can no longer be evicted; returns its bytes, now the caller's to
        hand to `submit*` (or to `release`)."""
        with self._cond:
            self._holds.pop(id(hold), None)
            nbytes, hold.nbytes = (0 if hold.is_evicted else hold.nbytes), 0
            return nbytes

    def drop(self, hold: Hold) -> None:
        """Give back what `hold` still holds (the request ended without a ticket)."""
        self.release(self.settle(hold))

    def _take(self, nbytes: int, hold: Hold | None, can_evict: bool) -> Outcome | None:
        """Under the lock: add `nbytes` to the pending bytes, evicting stalled holds (never `hold`) if needed
        and `can_evict`."""
        if self.closed:
            self.refused_closed += 1
            return Outcome.CLOSED
        if can_evict and self._over(nbytes):
            self._evict_stalled(self.pending_bytes + nbytes - self.max_pending_bytes, hold)
        if self._over(nbytes):
            self.refused_busy += 1
            return Outcome.BUSY
        self.pending_bytes += nbytes
        return None

    def _over(self, nbytes: int) -> bool:
        """Under the lock: would `nbytes` more pass the budget? (A first request always fits.)"""
        return bool(self.pending_bytes) and self.pending_bytes + nbytes > self.max_pending_bytes

    def _evict_stalled(self, needed: int, keep: Hold | None) -> None:
        """Under the lock: take back the bytes of holds stalled for `stall_s`, longest-stalled first, until
        `needed` bytes are free or none is left; each evicted hold's `on_evict` is called."""
        stalled_before = time.monotonic_ns() - int(self.stall_s * 1e9)
        victims = sorted(
            (h for h in self._holds.values() if h is not keep and h.nbytes and h.progress_ns <= stalled_before),
            key=lambda h: h.progress_ns,
        )
        for hold in victims:
            if needed <= 0:
                break
            if hold.unread is not None and hold.unmarked + hold.unread() >= PROGRESS_BYTES:
                continue  # its peer is sending: the bytes wait for the receiver to read them
            del self._holds[id(hold)]
            hold.is_evicted = True
            self.pending_bytes -= hold.nbytes
            needed -= hold.nbytes
            self.num_evicted += 1
            if hold.on_evict is not None:
                hold.on_evict()

    def release(self, nbytes: int) -> None:
        """Give back a reservation (the request was answered)."""
        with self._cond:
            self.pending_bytes -= nbytes

    def submit(self, payload: bytes, fmt: str, origin: str, peer: str, reserved: int) -> Ticket:
        """Hand a body whose bytes are reserved to the writer and wait until it is answered; the reservation
        is released by then. A ticket refused because the queue closed comes back CLOSED."""
        ticket = self.submit_nowait(payload, fmt, origin, peer, reserved)
        ticket.wait()
        return ticket

    def submit_nowait(
        self, payload: bytes, fmt: str, origin: str, peer: str, reserved: int, on_done: Callable[[], None] | None = None
    ) -> Ticket:
        """`submit` without the wait: `on_done` is called once the ticket is resolved (at once, CLOSED, when
        the queue is closed)."""
        position = RECEIVED_POSITION.format(next(self._positions), peer)
        ticket = Ticket(payload, fmt, origin, position, reserved, on_done=on_done)
        if not self.put(ticket):
            self.release(reserved)
            with self._cond:
                self.refused_closed += 1
            ticket.resolve(Outcome.CLOSED)
        return ticket

    def put(self, ticket: Ticket) -> bool:
        """Queue a ticket whose bytes are reserved; False (and nothing queued) once the queue is closed."""
        with self._cond:
            if self.closed:
                return False
            ticket.queued_ns = time.monotonic_ns()
            self._items.append(ticket)
            self._queued_bytes += len(ticket.payload)
            self._cond.notify()
            return True

    # -- writer side ---------------------------------------------------------------------------------------
    def take(
        self, linger_s: float, max_group_bytes: int, wait_s: float | None = None, gap_s: float | None = None
    ) -> list[Ticket] | None:
        """The next group for one ingest: blocks for a first ticket, then lets the group grow while tickets
        keep coming (none for `gap_s`: go), until the oldest has waited `linger_s` or the group holds
        `max_group_bytes`. [] once closed and drained; None when `wait_s` passed with nothing queued.

        Exporters that wait for their answers send again together, within a few ms of the last answer:
        waiting the whole linger for company that was not coming left the writer idle a fifth of the time."""
        with self._cond:
            deadline_first = None if wait_s is None else time.monotonic() + wait_s
            while not self._items and not self.closed:
                left = None if deadline_first is None else deadline_first - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)
            if not self._items:
                return []
            deadline = self._items[0].queued_ns + int(linger_s * 1e9)
            while not self.closed and self._queued_bytes < max_group_bytes:
                until = deadline if gap_s is None else min(deadline, self._items[-1].queued_ns + int(gap_s * 1e9))
                left = (until - time.monotonic_ns()) / 1e9
                if left <= 0:
                    break
                self._cond.wait(left)
            group, size = [], 0
            while self._items and (not group or size + len(self._items[0].payload) <= max_group_bytes):
                t = self._items.popleft()
                group.append(t)
                size += len(t.payload)
            self._queued_bytes -= size
            return group

    def close(self) -> None:
        """Refuse new reservations and tickets; `take` drains what is queued, then returns []."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()
