"""The engine on its own thread: steps while work exists, sleeps when idle; the server hands it requests."""

from __future__ import annotations

import gc
import logging
import threading
from typing import TYPE_CHECKING

from budgetscope.engine.admission import ServiceRate, admit, observe_step, observe_wait
from budgetscope.engine.engine_metrics import EngineGauges
from budgetscope.engine.sequence import Sequence
from budgetscope.gil import short_switch_interval

if TYPE_CHECKING:  # the API process of `engine serve` imports this module and must not load torch
    from budgetscope.engine.llm_engine import LLMEngine

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
        self.on_dead = None  # as CoreClient's; never called: a failed step fails its requests, not the loop
        self._thread = threading.Thread(target=self._run, name="budgetscope-engine", daemon=True)

    def start(self) -> EngineLoop:
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
    def front(self):
        """The engine's request-facing half (Frontend): what the HTTP server needs of it."""
        return self.engine.front

    @property
    def num_waiting(self) -> int:
        """Requests waiting for their first schedule (queued in the scheduler or not yet handed over)."""
        return self._num_waiting + len(self._inbox)

    def submit(self, seq: Sequence) -> None:
        """Enqueue seq (marks its queue stage); RequestError(429) when the waiting queue is full, or when seq has
        a deadline that the measured service rate says it cannot start in time (engine/admission.py)."""
        with self._cond:
            admit(
                seq,
                self.engine.config,
                self.engine.metrics,
                self.service,
                num_waiting=self._num_waiting + len(self._inbox),
                ahead=self._ahead,
                free_slots=self._free_slots,
            )
            seq.trace.mark("queue")
            self._inbox.append(seq)
            self._cond.notify()

    def _ahead(self, priority: int) -> int:
        """Requests waiting at `priority` or a more important one, handed over or not."""
        return sum(n for p, n in self._waiting_by_priority.items() if p <= priority) + sum(
            1 for s in self._inbox if s.priority <= priority
        )

    def abort(self, seq: Sequence, outcome: str = "cancelled", reason: str = "abort") -> None:
        """Finish seq at the next step boundary and free its blocks."""
        with self._cond:
            self._aborts.append((seq, outcome, reason))
            self._cond.notify()

    def render_metrics(self) -> str:
        """/metrics: the engine's Prometheus text, gauges read now."""
        return self.engine.metrics.render(EngineGauges.of(self.engine))

    def health(self) -> str | None:
        """None while the engine serves; why not otherwise (never, in process: a failed step fails its requests)."""
        return None

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
        observe_step(self.service, touched)

    def _observe_wait(self, seq: Sequence, now: int | None = None) -> None:
        observe_wait(self.service, seq, now)

    def _fail_all(self) -> None:
        self.engine.discard_inflight()
        sched = self.engine.scheduler
        for seq in sched.running + [s for q in sched.waiting.values() for s in q]:
            sched.finish(seq, "error", "error")
            if seq.on_output is not None:
                seq.on_output(seq)
