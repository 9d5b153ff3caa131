"""The engine on its own thread: steps while work exists, sleeps when idle; the server hands it requests."""

from __future__ import annotations

import gc
import logging
import math
import threading
import time

from budgetscope.engine.admission import ServiceRate, expected_wait_s, finishes_to_wait, refusal
from budgetscope.engine.errors import RequestError
from budgetscope.engine.llm_engine import LLMEngine
from budgetscope.engine.sequence import Sequence
from budgetscope.gil import short_switch_interval

log = logging.getLogger(__name__)


def freeze_heap() -> None:
    """Move every object alive now (the model, torch modules, imported code) out of the garbage collector's
    reach. They live as long as the server; without this, each full collection that a request's allocations
    trigger walks all of them, a pause of 10–20 ms in the middle of a decode step on the `tiny` model."""
    gc.collect()
    gc.freeze()


class EngineLoop:
    """Thread-safe front of an LLMEngine. submit()/abort() may be called from any thread; every change to
    the engine happens on the loop's thread at the top of a step, so an abort frees blocks within one step.
    """

    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self._cond = threading.Condition()
        self._inbox: list[Sequence] = []
        self._aborts: list[tuple[Sequence, str, str]] = []
        self._num_waiting = 0  # scheduler's waiting count after the last step, read by submit()
        self._waiting_by_priority: dict[int, int] = {}  # the same, per priority
        self._free_slots = engine.config.max_num_seqs  # sequence slots the running batch left free, the same
        self.service = ServiceRate()  # measured on this thread, read by submit() for deadline-aware admission
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="budgetscope-engine", daemon=True)

    def start(self) -> "EngineLoop":
        freeze_heap()
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        gc.unfreeze()  # what start() froze is collectable again (and freed at exit)

    @property
    def num_waiting(self) -> int:
        """Requests waiting for their first schedule (queued in the scheduler or not yet handed over)."""
        return self._num_waiting + len(self._inbox)

    def submit(self, seq: Sequence) -> None:
        """Enqueue seq (marks its queue stage); RequestError(429) when the waiting queue is full, or when seq has
        a deadline that the measured service rate says it cannot start in time (engine/admission.py)."""
        limit = self.engine.config.max_waiting
        with self._cond:
            if limit and self._num_waiting + len(self._inbox) >= limit:
                raise RequestError(429, f"the engine is overloaded: {limit} requests already waiting",
                                   type="rate_limit_exceeded", retry_after_s=self.retry_after_s())
            if self.engine.config.deadline_admission and seq.deadline_ns is not None:
                self._admit_by_deadline(seq)
            seq.trace.mark("queue")
            self._inbox.append(seq)
            self._cond.notify()

    def _admit_by_deadline(self, seq: Sequence) -> None:
        """RequestError(429) when the finishes seq waits for, at the measured service rate, outlast its deadline."""
        ahead = sum(n for p, n in self._waiting_by_priority.items() if p <= seq.priority)
        ahead += sum(1 for s in self._inbox if s.priority <= seq.priority)
        deadline_s = (seq.deadline_ns - time.time_ns()) / 1e9
        wait_s = expected_wait_s(self.service, finishes_to_wait(ahead, self._free_slots))
        retry = refusal(self.service, deadline_s, wait_s)
        if retry is not None:
            self.engine.metrics.deadline_refusals += 1
            rate = self.service.rate_per_s() or 0.0
            raise RequestError(429, f"the engine cannot start this request within its deadline of {deadline_s:.2f} s: "
                                    f"{ahead} requests ahead at {rate:.1f} requests/s",
                               type="rate_limit_exceeded", retry_after_s=retry)
        if wait_s:  # how long it really waits calibrates the next forecasts
            seq.wait_forecast = (time.monotonic_ns(), wait_s)

    def abort(self, seq: Sequence, outcome: str = "cancelled", reason: str = "abort") -> None:
        """Finish seq at the next step boundary and free its blocks."""
        with self._cond:
            self._aborts.append((seq, outcome, reason))
            self._cond.notify()

    def retry_after_s(self) -> int:
        """Seconds a rejected client should wait: the waiting queue drained at the observed request rate."""
        e2e = self.engine.metrics.e2e
        mean_s = e2e.sum / e2e.count if e2e.count else 1.0
        per_slot = self._num_waiting / max(self.engine.config.max_num_seqs, 1)
        return int(min(60, max(1, math.ceil(per_slot * mean_s))))

    def _run(self) -> None:
        # The HTTP thread and the span export thread share the GIL with this one: a short switch interval
        # keeps their bursts out of inter-token latency (budgetscope.gil). Process-wide while the loop runs.
        with short_switch_interval():
            self._loop()

    def _loop(self) -> None:
        engine = self.engine
        while True:
            with self._cond:
                while not (self._inbox or self._aborts or self._stopping or engine.has_work):
                    self._cond.wait()
                if self._stopping:
                    return
                inbox, self._inbox = self._inbox, []
                aborts, self._aborts = self._aborts, []
            for seq in inbox:
                engine.scheduler.add(seq)
            for seq, outcome, reason in aborts:
                engine.abort(seq, outcome, reason)
                self._observe_wait(seq)
            try:
                if engine.has_work:
                    self._observe(engine.step())
            except Exception:  # a failed step fails its requests, never the server
                log.exception("engine step failed; failing every request in flight")
                self._fail_all()
            self._num_waiting = engine.scheduler.num_waiting
            self._waiting_by_priority = {p: len(q) for p, q in list(engine.scheduler.waiting.items())}
            self._free_slots = engine.config.max_num_seqs - engine.scheduler.num_running
            self.service.observe_busy(engine.has_work)

    def _observe(self, touched: list[Sequence]) -> None:
        """Feed the service rate with the requests that finished ok in this step, and the calibration with the
        waits of those first scheduled (or timed out unscheduled)."""
        now = time.monotonic_ns()
        for seq in touched:
            self._observe_wait(seq, now)
            if seq.is_finished and seq.outcome == "ok" and seq.admitted_mono_ns is not None:
                self.service.observe_finish(now - seq.admitted_mono_ns, now)

    def _observe_wait(self, seq: Sequence, now: int | None = None) -> None:
        """Once: how long seq waited for its first schedule against its forecast; one that left the queue
        unscheduled (aborted, timed out) waited at least until now."""
        if seq.wait_forecast is None or not (seq.admitted_mono_ns is not None or seq.is_finished):
            return
        submitted, forecast_s = seq.wait_forecast
        seq.wait_forecast = None
        end = seq.admitted_mono_ns if seq.admitted_mono_ns is not None else (now or time.monotonic_ns())
        self.service.observe_wait(forecast_s, (end - submitted) / 1e9)

    def _fail_all(self) -> None:
        sched = self.engine.scheduler
        for seq in sched.running + [s for q in sched.waiting.values() for s in q]:
            sched.finish(seq, "error", "error")
            if seq.on_output is not None:
                seq.on_output(seq)
