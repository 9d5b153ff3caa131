"""`ExportWorker`: the background thread that builds spans from finished records and exports them.

The hot path only appends a record to a deque. The worker wakes every `schedule_delay_s`, when enough
records wait for a full batch, or on `flush()`; it builds spans in its own thread and hands batches of at
most `max_batch_spans` spans to the exporter (the same batching knobs as the OpenTelemetry
BatchSpanProcessor). A full queue drops new records and counts them, so a stalled collector never grows
the service's memory.

The worker paces itself: it builds a few records, then sleeps a moment, so its share of the GIL comes in
slices of ~0.1 ms spread over many engine steps instead of one burst of a few ms landing inside one step
(which showed as an inter-token-latency spike for every sequence of that step). It stops pacing when the
queue grows long (it must keep up), on `flush()` and on shutdown.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

_log = logging.getLogger(__name__)
_SPANS_PER_RECORD = 7  # a typical request: root + 6 stage spans; sizes the early wake-up only
SLICE_RECORDS = 4
"""Records built between two pauses."""
PAUSE_S = 0.001
"""The pause: the worker then builds at most ~4 records a millisecond, far above what an engine produces
(one record a step and one a request), and leaves the GIL to the threads that serve."""
CATCH_UP_RECORDS = 1024
"""With more records than this waiting, the worker builds without pauses until it has caught up."""


class ExportWorker:
    """Builds and exports records off the caller's thread."""

    def __init__(
        self,
        build: Callable[[Any], list[Any]],
        exporter: Any,
        *,
        schedule_delay_s: float = 1.0,
        max_batch_spans: int = 512,
        max_queued_records: int = 8192,
    ) -> None:
        self._build = build
        self._exporter = exporter
        self._delay = schedule_delay_s
        self._max_batch = max(1, max_batch_spans)
        self._max_queued = max(1, max_queued_records)
        self._wake_at = max(1, self._max_batch // _SPANS_PER_RECORD)
        self._pending: collections.deque[Any] = collections.deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._flush_waiters: list[threading.Event] = []
        self._stopping = False
        self.dropped = 0
        """Records dropped because the queue was full or the worker was shut down."""
        self.exported_spans = 0
        self.failed_spans = 0
        self._in_flight = 0  # spans of the batch the exporter holds now
        self._thread = threading.Thread(target=self._run, name="budgetscope-export", daemon=True)
        self._thread.start()

    def submit(self, record: Any) -> None:
        """Queue a record for building and export (called on the hot path: an append and a length check)."""
        pending = self._pending
        if len(pending) >= self._max_queued or self._stopping:
            self._count_drop()
            return
        pending.append(record)
        if len(pending) >= self._wake_at and not self._wake.is_set():
            self._wake.set()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Build and export everything queued so far; True when done within `timeout_s`."""
        if not self._thread.is_alive():
            return not self._pending
        done = threading.Event()
        # Bounded: a SIGTERM handler may flush while the main thread it interrupted holds this lock.
        if not self._lock.acquire(timeout=timeout_s):
            return False
        self._flush_waiters.append(done)
        self._lock.release()
        self._wake.set()
        if not done.wait(timeout_s):
            return False
        return bool(self._exporter.force_flush(int(timeout_s * 1000)))

    def shutdown(self, timeout_s: float = 30.0) -> str:
        """Export what is queued, stop the thread, shut the exporter down. Idempotent.

        Returns what could not be exported within `timeout_s` ("" when everything went out): spans whose
        export failed meanwhile or was still running at the deadline, and records never built. An export
        still running at the deadline (a collector gone, retried) is left to end with the process: the
        exporter's own shutdown could wait for it."""
        if self._stopping:
            return ""
        self._stopping = True  # first: a SIGTERM flush that interrupts this call returns at once
        failed_before = self.failed_spans
        self._wake.set()
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            try:
                self._exporter.shutdown()
            except Exception:  # noqa: BLE001 - shutdown must not raise into atexit
                _log.exception("budgetscope: exporter shutdown failed")
        with self._lock:
            lost = self.failed_spans - failed_before + self._in_flight
        return _shortfall(lost, len(self._pending))

    def _run(self) -> None:
        while True:
            self._wake.wait(self._delay)
            self._wake.clear()
            with self._lock:
                waiters, self._flush_waiters = self._flush_waiters, []
            self._drain()
            for done in waiters:
                done.set()
            if self._stopping:
                self._drain()
                with self._lock:
                    waiters, self._flush_waiters = self._flush_waiters, []
                for done in waiters:
                    done.set()
                return

    def _drain(self) -> None:
        batch: list[Any] = []
        pending = self._pending
        built = 0
        while pending:
            record = pending.popleft()
            try:
                batch.extend(self._build(record))
            except Exception:  # noqa: BLE001 - one bad record must not stop the export thread
                _log.exception("budgetscope: could not build spans for %r", record)
            if len(batch) >= self._max_batch:
                self._export(batch)
                batch = []
            built += 1
            if built % SLICE_RECORDS == 0 and pending and self._paced():
                time.sleep(PAUSE_S)
        if batch:
            self._export(batch)

    def _paced(self) -> bool:
        """Whether to pause between slices: not when someone waits on a flush, on shutdown, or far behind."""
        return not (self._stopping or self._flush_waiters or len(self._pending) > CATCH_UP_RECORDS)

    def _export(self, batch: list[Any]) -> None:
        self._in_flight = len(batch)
        try:
            result = self._exporter.export(batch)
            ok = getattr(result, "name", "SUCCESS") == "SUCCESS"
        except Exception:  # noqa: BLE001 - a failing collector must not stop the export thread
            _log.exception("budgetscope: span export failed")
            ok = False
        with self._lock:  # one step, so that shutdown() never counts a batch twice or not at all
            self._in_flight = 0
            if ok:
                self.exported_spans += len(batch)
            else:
                self.failed_spans += len(batch)

    def _count_drop(self) -> None:
        if self.dropped == 0:
            _log.warning("budgetscope: export queue full or shut down; dropping requests (see .dropped)")
        self.dropped += 1


def _shortfall(spans: int, records: int) -> str:
    """What was not exported, in words ("" when nothing)."""
    parts = [f"{spans:,} spans not exported"] if spans else []
    if records:
        parts.append(f"{records:,} finished requests/steps not built into spans")
    return ", ".join(parts)
