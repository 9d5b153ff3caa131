"""The API server process's end of the engine process: `submit` / `abort` as `EngineLoop` offers them in process.

`CoreClient.start()` spawns `core_process.main` (multiprocessing's spawn context: a fresh interpreter, never a
fork of one that may hold CUDA) with one end of a socket pair, and waits for READY. A reader thread then takes the
STEP messages: it appends each request's new tokens to the API's Sequence, replays the engine's stage events onto
the request's trace (so every span is built here, by this process's exporter), counts tokens in the metrics, and
calls `on_output` as the engine thread does in process. Admission (`--max-waiting`, deadlines) is decided here on
the state the engine sent with its last step, plus the requests sent since that it has not taken yet.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections import deque
from collections.abc import Callable

from budgetscope.engine import core_process  # torch-free at import; loads torch in the child only
from budgetscope.engine import core_protocol as P
from budgetscope.engine.admission import admit
from budgetscope.engine.engine_metrics import EngineGauges
from budgetscope.engine.errors import RequestError
from budgetscope.engine.frontend import Frontend
from budgetscope.engine.sequence import Sequence, SequenceStatus
from budgetscope.instrument.attributes import MARKABLE_STAGES

log = logging.getLogger(__name__)


class EngineCoreError(RuntimeError):
    """The engine process could not start, or stopped while serving."""


class CoreClient:
    """Thread-safe: submit()/abort() from any thread. `on_dead(reason)` is called (reader thread) if the engine
    process dies; every request in flight has then ended with outcome `error`, and later ones get 503."""

    def __init__(self, front: Frontend, log_level: str = "warning", make_engine: Callable | None = None):
        self.front = front
        self.make_engine = make_engine  # None: an LLMEngine (core_process.EngineCore); benchmarks pass a fake
        self.config = front.config
        self.metrics = front.metrics
        self.telemetry = front.telemetry
        self.log_level = log_level
        self.state = P.CoreState(
            gauges=EngineGauges(kv_blocks_total=self.config.num_kv_blocks), free_slots=self.config.max_num_seqs
        )
        self.on_dead: Callable[[str], None] | None = None
        self.pid: int | None = None
        self.device: str | None = None
        self._live: dict[int, Sequence] = {}  # by handle (the Sequence's seq_id): what the engine still runs for us
        self._lock = threading.Lock()  # one writer on the socket at a time; admission sees one state
        self._in_transit: deque[int] = deque()  # priorities of the requests sent that the engine has not taken yet
        self._taken = 0  # requests the engine had taken when _in_transit was last trimmed
        self._dead: str | None = None
        self._stopping = False
        self._proc = None
        self._conn = None
        self._reader: threading.Thread | None = None

    # -- life -------------------------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 900.0) -> CoreClient:
        """Spawn the engine process and wait until its model is loaded; EngineCoreError when it cannot start."""
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(
            target=core_process.main,
            args=(child, self.config, self.log_level, self.make_engine),
            name="budgetscope-engine-core",
        )
        self._proc.start()
        child.close()  # ours closed: the child's death then reads as end of file here
        _, self.pid, self.device, num_blocks = self._wait_ready(timeout_s)
        self.state.gauges.kv_blocks_total = num_blocks
        self._reader = threading.Thread(target=self._read, name="budgetscope-core-reader", daemon=True)
        self._reader.start()
        return self

    def _wait_ready(self, timeout_s: float) -> list:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self._conn.poll(0.1):
                    msg = P.unpack(self._conn.recv_bytes())
                    if msg[0] == P.READY:
                        return msg
                    if msg[0] == P.FATAL:
                        self._proc.join(10)
                        raise EngineCoreError(f"the engine process could not start: {msg[1]}")
            except EOFError:
                break
            if not self._proc.is_alive() and not self._conn.poll(0):
                break
        else:
            self._proc.kill()
            raise EngineCoreError(f"the engine process was not ready within {timeout_s:.0f} s")
        self._proc.join(10)
        raise EngineCoreError(f"the engine process {_exit_words(self._proc.exitcode)} before it was ready")

    def stop(self, timeout_s: float = 10.0) -> None:
        """Tell the engine process to stop and wait for it (killed after `timeout_s`)."""
        if self._proc is None:
            return
        self._stopping = True
        try:
            with self._lock:
                self._conn.send_bytes(P.pack([P.STOP]))
        except OSError:
            pass
        self._proc.join(timeout_s)
        if self._proc.is_alive():
            log.warning("the engine process did not stop within %.0f s; killing it", timeout_s)
            self._proc.kill()
            self._proc.join(5)
        if self._reader is not None:
            self._reader.join(5)
        self._conn.close()

    def health(self) -> str | None:
        """None while the engine process serves; why not otherwise."""
        return self._dead

    def render_metrics(self) -> str:
        """/metrics: the counters and histograms kept here, the gauges the engine sent with its last step."""
        return self.metrics.render(self.state.gauges)

    # -- requests ---------------------------------------------------------------------------------------------------
    def submit(self, seq: Sequence) -> None:
        """Admit seq (RequestError 429 as EngineLoop.submit; 503 when the engine process is gone), mark its queue
        stage and send it to the engine process."""
        with self._lock:
            if self._dead is not None:
                raise RequestError(503, f"the engine is not running: {self._dead}", type="service_unavailable")
            state = self.state
            self._trim_in_transit(state.received)
            admit(
                seq,
                self.config,
                self.metrics,
                state.rate,
                num_waiting=state.gauges.num_waiting + len(self._in_transit),
                ahead=lambda priority: self._ahead(state, priority),
                free_slots=state.free_slots,
            )
            seq.trace.mark("queue")
            p = seq.params
            self._live[seq.seq_id] = seq  # before it is sent: the reader may see its first output at once
            try:
                self._send(
                    [
                        P.ADD,
                        seq.seq_id,
                        seq.request_id,
                        seq.token_ids,
                        [p.max_tokens, p.temperature, p.top_p, p.top_k, p.seed, p.ignore_eos],
                        seq.tier,
                        seq.priority,
                        seq.arrival_ns,
                        seq.deadline_ns,
                        seq.trace.traceparent,
                        list(seq.wait_forecast) if seq.wait_forecast is not None else None,
                    ]
                )
            except RequestError:
                self._live.pop(seq.seq_id, None)
                raise
            self._in_transit.append(seq.priority)

    def abort(self, seq: Sequence, outcome: str = "cancelled", reason: str = "abort") -> None:
        """End seq now here (later outputs for it are dropped) and free its blocks in the engine at its next step."""
        with self._lock:
            if self._live.pop(seq.seq_id, None) is None:
                return  # finished or aborted already
            seq.finish_reason, seq.outcome, seq.status = reason, outcome, SequenceStatus.FINISHED
            if self._dead is None:
                try:
                    self._send([P.ABORT, seq.seq_id, outcome, reason])
                except RequestError:  # the engine process has gone: nothing of it is left to free
                    pass

    @property
    def num_in_transit(self) -> int:
        """Requests sent that the engine had not taken into its scheduler at its last message."""
        with self._lock:
            self._trim_in_transit(self.state.received)
            return len(self._in_transit)

    def _trim_in_transit(self, received: int) -> None:
        while self._taken < received and self._in_transit:
            self._in_transit.popleft()
            self._taken += 1

    def _ahead(self, state: P.CoreState, priority: int) -> int:
        """Requests waiting at `priority` or a more important one: in the engine's queue, or on their way to it."""
        return sum(n for p, n in state.waiting_by_priority.items() if p <= priority) + sum(
            1 for p in self._in_transit if p <= priority
        )

    def _send(self, message: list) -> None:
        """One message to the engine process (the caller holds the lock); 503 when it is gone."""
        try:
            self._conn.send_bytes(P.pack(message))
        except OSError:
            raise RequestError(
                503, "the engine is not running: its process has gone", type="service_unavailable"
            ) from None

    # -- outputs ----------------------------------------------------------------------------------------------------
    def _read(self) -> None:
        try:
            while True:
                msg = P.unpack(self._conn.recv_bytes())
                if msg[0] == P.STEP:
                    self._on_step(msg)
        except (EOFError, OSError):
            pass
        except Exception:
            log.exception("could not read the engine process's output")
        if not self._stopping:
            self._proc.join(2)
            self._die(f"the engine process {_exit_words(self._proc.exitcode)}")

    def _on_step(self, msg: list) -> None:
        _, token_ns, entries, step, state = msg
        live, metrics = self._live, self.metrics
        if step is not None:  # first: a request the entries finish may end its response (and a flush) before
            self.telemetry.step(**dict(zip(P.STEP_FIELDS, step)))
        for handle, ids, events, reason, outcome, cached in entries:
            seq = live.get(handle)
            if seq is None:  # the API side ended it (stop string, client gone) after the engine made these
                continue
            _replay(seq.trace, events)
            for _ in ids:
                metrics.observe_token(seq, token_ns)
                seq.first_token_ns = seq.first_token_ns or token_ns
                seq.last_token_ns = token_ns
            seq.num_cached_tokens = cached
            seq.token_ids.extend(ids)
            if reason is not None:
                seq.finish_reason, seq.outcome, seq.status = reason, outcome, SequenceStatus.FINISHED
                live.pop(handle, None)
            if (ids or reason is not None) and seq.on_output is not None:
                seq.on_output(seq)
        self.state = P.CoreState.from_list(state)

    def _die(self, reason: str) -> None:
        """The engine process is gone: end every request in flight with `error`, answer 503 from now on."""
        with self._lock:
            if self._dead is not None:
                return
            self._dead = reason
            failed, self._live = list(self._live.values()), {}
        log.error("%s; failing %d requests in flight", reason, len(failed))
        for seq in failed:
            seq.finish_reason, seq.outcome, seq.status = "error", "error", SequenceStatus.FINISHED
            if seq.on_output is not None:
                seq.on_output(seq)
        if self.on_dead is not None:
            self.on_dead(reason)


def _replay(trace, events: list[int]) -> None:
    """The engine's stage marks and token times, onto the API process's request trace."""
    for i in range(0, len(events), 2):
        code, t = events[i], events[i + 1]
        if code == P.TOKEN:
            trace.token_at(t)
        else:
            trace.mark_at(MARKABLE_STAGES[code], t)


def _exit_words(code: int | None) -> str:
    """How a process ended, in words."""
    if code is None:
        return "stopped answering"
    if code < 0:
        return f"was killed by signal {-code}"
    return f"exited with code {code}"
