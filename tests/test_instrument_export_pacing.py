"""The export worker builds in slices with pauses (so its GIL use never lands as one burst), but never pauses
when someone waits on a flush or when it has fallen far behind."""

from __future__ import annotations

import threading

from budgetscope.instrument import export_worker
from budgetscope.instrument.export_worker import ExportWorker


class FakeExporter:
    """A fake exporter: keeps what it is given."""

    def __init__(self):
        self.spans: list = []

    def export(self, spans):
        self.spans.extend(spans)

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def _worker(exporter):
    # a long schedule delay: the worker drains only when woken
    return ExportWorker(lambda record: [record], exporter, schedule_delay_s=3600, max_batch_spans=1000)


def test_drain_pauses_between_slices(monkeypatch):
    exporter = FakeExporter()
    w = _worker(exporter)
    pauses = []
    monkeypatch.setattr(export_worker.time, "sleep", pauses.append)
    for i in range(3 * export_worker.SLICE_RECORDS):
        w._pending.append(i)
    w._drain()  # as the worker thread does when woken by the timer or the queue length
    assert exporter.spans == list(range(3 * export_worker.SLICE_RECORDS))
    assert pauses == [export_worker.PAUSE_S] * 2  # after the 1st and 2nd slice, none after the last
    w.shutdown()


def test_no_pause_when_flushing_or_far_behind(monkeypatch):
    exporter = FakeExporter()
    w = _worker(exporter)
    pauses = []
    monkeypatch.setattr(export_worker.time, "sleep", pauses.append)
    w._flush_waiters.append(threading.Event())
    for i in range(20):
        w._pending.append(i)
    w._drain()
    w._flush_waiters.clear()
    n, cap, size = export_worker.CATCH_UP_RECORDS + 20, export_worker.CATCH_UP_RECORDS, export_worker.SLICE_RECORDS
    for i in range(n):
        w._pending.append(i)
    w._drain()
    # far behind: flat out until the queue is back to CATCH_UP_RECORDS, then paced again
    assert len(pauses) == sum(1 for built in range(size, n, size) if n - built <= cap)
    assert len(pauses) < n // size
    assert len(exporter.spans) == 20 + export_worker.CATCH_UP_RECORDS + 20
    w.shutdown()


def test_flush_exports_everything_without_waiting_on_pauses():
    exporter = FakeExporter()
    w = _worker(exporter)
    for i in range(5000):
        w.submit(i)
    assert w.flush(timeout_s=10)
    assert len(exporter.spans) == 5000
    w.shutdown()
