"""The engine process of `engine serve`: owns the LLMEngine (scheduler, KV cache, model) and steps it.

Started by `CoreClient` (multiprocessing, spawn: never forked after torch or CUDA is initialised). It takes requests
and aborts from the API server process over one socket and sends back, once per step, every request's new token
ids, stage events, finish, and the engine's state (`core_protocol`). The loop overlaps the device: it launches step
N, then sends step N-1's outputs and reads new messages while the GPU runs N, then waits for N's tokens. With async
scheduling (on by default with CUDA) the launch is of step N+1, scheduled before N's tokens are read back, and the
wait is for N's: the GPU always has the next step queued.

It exports no span itself: its stage events and `engine.step` records travel back with the outputs and the API
process's exporter builds every span (docs/engine.md, "The engine process").
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import time
from collections.abc import Callable

from budgetscope import cores
from budgetscope.engine import core_protocol as P
from budgetscope.engine.admission import (
    RateSnapshot,
    ServiceRate,
    observe_step,
    observe_wait,
)
from budgetscope.engine.engine_config import EngineConfig
from budgetscope.engine.engine_loop import freeze_heap
from budgetscope.engine.engine_metrics import EngineGauges
from budgetscope.engine.sampling_params import SamplingParams
from budgetscope.engine.sequence import Sequence

log = logging.getLogger(__name__)
_now = time.perf_counter_ns


class CoreTrace:
    """A request's trace inside the engine process: stage marks and token times, kept as events until the next
    STEP message carries them to the API process, whose RequestTrace replays them (`mark_at`, `token_at`)."""

    __slots__ = ("_dirty", "events", "handle", "num_sent", "traceparent")

    def __init__(self, handle: int, traceparent: str | None, num_prompt_tokens: int, dirty: list):
        self.handle = handle
        self.traceparent = traceparent  # the API's root span: names the request's trace in the engine's logs
        self.events: list[int] = []
        self.num_sent = num_prompt_tokens  # tokens of the sequence the API process already has
        self._dirty = dirty

    def mark(self, stage: str) -> None:
        self._event(P.STAGE_CODES[stage])

    def token(self) -> None:
        self._event(P.TOKEN)

    def touch(self) -> None:
        """Make the next STEP message carry this request (its finish) even without a new event."""
        if not self.events:
            self._dirty.append(self)

    def _event(self, code: int) -> None:
        if not self.events:
            self._dirty.append(self)
        self.events += (code, _now())

    def set(self, key, value) -> None:  # the API process sets the request's attributes
        pass

    def finish(self, **_) -> None:
        pass


class StepRecorder:
    """The engine's telemetry inside the engine process: keeps the last step's `engine.step` fields to send."""

    enabled = True
    is_exporting = False

    def __init__(self):
        self.last: list | None = None

    def step(self, **fields) -> None:
        self.last = [fields[name] for name in P.STEP_FIELDS]

    def flush(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


class EngineCore:
    """The loop of the engine process. `conn`: its end of the socket to the API process. `make_engine(config,
    telemetry)`: builds the engine it steps (default: an LLMEngine; benchmarks pass a fake with timed steps)."""

    def __init__(self, config: EngineConfig, conn, make_engine: Callable | None = None):
        self.conn = conn
        self.parent_pid = os.getppid()
        self.recorder = StepRecorder()
        if make_engine is None:
            # imported on use: torch 5376 ms, concurrent.futures 92 ms, asyncio 89 ms to import
            from budgetscope.engine.llm_engine import LLMEngine, resolve_device

            if config.async_scheduling is None:  # auto: on where the device runs behind the host
                config = dataclasses.replace(config, async_scheduling=resolve_device(config).type == "cuda")
            make_engine = LLMEngine
        self.engine = make_engine(config, self.recorder)
        if self.engine.device.type == "cpu" and not config.num_threads:
            _leave_a_core_to_the_api_process()
        self.service = ServiceRate()
        self.seqs: dict[int, Sequence] = {}  # by the API process's handle
        self.dirty: list[CoreTrace] = []  # traces with something to send
        self.inbox: list[list] = []  # messages read, applied between steps
        self.received = 0
        self.stopping = False
        # With a device that runs behind the host (CUDA), step N-1's outputs are sent while step N runs; on a CPU
        # launch() computes the step, so outputs go out as soon as their step is done.
        self.overlap = self.engine.runs_behind_host

    def run(self) -> None:
        freeze_heap()
        self._send(P.pack([P.READY, os.getpid(), str(self.engine.device), self.engine.block_manager.num_blocks]))
        engine, out = self.engine, None
        while not self.stopping:
            changed = self._apply_inbox()
            if self.stopping:
                break
            if not engine.has_work:
                if out is not None:
                    self._send(out)
                    out = None
                if changed or self.dirty:  # aborts or requests taken since: the API process sees the state now
                    self._send(self._encode(None))
                self._receive(block=True)
                continue
            self.recorder.last = None
            try:
                launched = engine.launch_step()
                if out is not None:  # step N-1's outputs go out while step N runs on the device
                    self._send(out)
                    out = None
                self._receive(block=False)
                observe_step(self.service, engine.finish_step(launched))
            except Exception:  # a failed step fails its requests, never the engine process
                log.exception("engine step failed; failing every request in flight")
                if out is not None:  # the step before's outputs first: they happened before the failure
                    self._send(out)
                    out = None
                self._fail_all()
            self.service.observe_busy(engine.has_work)
            out = self._encode(self.recorder.last)
            if not self.overlap:
                self._send(out)
                out = None
        if out is not None:
            self._send(out)

    # -- messages in ------------------------------------------------------------------------------------------------
    def _receive(self, block: bool) -> None:
        """Read every message waiting (with `block`, wait for one first). The API process gone: stop."""
        try:
            while not self.conn.poll(1.0 if block else 0):
                if not block:
                    return
                if os.getppid() != self.parent_pid:  # the API process died, yet its socket did not close
                    raise EOFError
            self.inbox.append(P.unpack(self.conn.recv_bytes()))
            while self.conn.poll(0):
                self.inbox.append(P.unpack(self.conn.recv_bytes()))
        except (EOFError, OSError):
            log.warning("the API server process is gone; the engine process stops")
            self.stopping = True

    def _apply_inbox(self) -> bool:
        """Hand the requests and aborts read so far to the scheduler (between steps only). True when any."""
        inbox, self.inbox = self.inbox, []
        for msg in inbox:
            kind = msg[0]
            if kind == P.ADD:
                self._add(msg)
            elif kind == P.ABORT:
                self._abort(msg)
            elif kind == P.STOP:
                self.stopping = True
        return bool(inbox)

    def _add(self, msg: list) -> None:
        _, handle, request_id, prompt, params, tier, priority, arrival_ns, deadline_ns, traceparent, forecast = msg
        max_tokens, temperature, top_p, top_k, seed, ignore_eos = params
        seq = Sequence(
            prompt,
            SamplingParams(max_tokens, temperature, top_p, top_k, seed, ignore_eos),
            request_id=request_id,
            tier=tier,
            priority=priority,
            arrival_ns=arrival_ns,
            deadline_ns=deadline_ns,
            trace=CoreTrace(handle, traceparent, len(prompt), self.dirty),
        )
        seq.wait_forecast = tuple(forecast) if forecast is not None else None
        self.seqs[handle] = seq
        self.engine.scheduler.add(seq)
        self.received += 1

    def _abort(self, msg: list) -> None:
        _, handle, outcome, reason = msg
        seq = self.seqs.pop(handle, None)
        if seq is not None:  # the API process has ended it: nothing more is sent about it
            self.engine.abort(seq, outcome, reason)
            observe_wait(self.service, seq)

    # -- messages out -----------------------------------------------------------------------------------------------
    def _encode(self, step: list | None) -> bytes:
        """The STEP message of what changed since the last one."""
        entries = []
        dirty = self.dirty[:]
        self.dirty.clear()  # in place: every CoreTrace holds this list
        for trace in dirty:
            events, trace.events = trace.events, []
            seq = self.seqs.get(trace.handle)
            if seq is None:  # aborted by the API process meanwhile
                continue
            new_ids = seq.token_ids[trace.num_sent :]
            trace.num_sent = len(seq.token_ids)
            if seq.is_finished:
                del self.seqs[trace.handle]
                entries.append([trace.handle, new_ids, events, seq.finish_reason, seq.outcome, seq.num_cached_tokens])
            else:
                entries.append([trace.handle, new_ids, events, None, None, seq.num_cached_tokens])
        return P.pack([P.STEP, time.time_ns(), entries, step, self._state().as_list()])

    def _state(self) -> P.CoreState:
        engine = self.engine
        sched = engine.scheduler
        return P.CoreState(
            received=self.received,
            gauges=EngineGauges.of(engine),
            waiting_by_priority={p: len(q) for p, q in sched.waiting.items() if q},
            free_slots=engine.config.max_num_seqs - sched.num_running,
            rate=RateSnapshot.of(self.service),
        )

    def _send(self, data: bytes) -> None:
        try:
            self.conn.send_bytes(data)
        except OSError:
            log.warning("the API server process is gone; the engine process stops")
            self.stopping = True

    def _fail_all(self) -> None:
        self.engine.discard_inflight()
        sched = self.engine.scheduler
        for seq in sched.running + [s for q in sched.waiting.values() for s in q]:
            sched.finish(seq, "error", "error")
            seq.trace.touch()


def _leave_a_core_to_the_api_process() -> None:
    """On a CPU, torch's intra-op threads default to every core; with the API process busy on one of them, each
    parallel region then waits for a descheduled thread (OpenMP barriers: steps 10-100x slower on 2 cores)."""
    # imported on use: torch 5376 ms to import
    import torch

    torch.set_num_threads(cores.all_but_one())


def main(conn, config: EngineConfig, log_level: str = "warning", make_engine: Callable | None = None) -> None:
    """The engine process's entry point (a multiprocessing spawn target). Ctrl-C and SIGTERM are the API process's
    to handle: it drains its requests, then sends STOP; this process ends then, or when its socket closes.
    `make_engine`: as EngineCore's (picklable: a module-level function or a partial of one)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        core = EngineCore(config, conn, make_engine)
    except Exception as exc:
        log.exception("the engine could not start")
        conn.send_bytes(P.pack([P.FATAL, f"{type(exc).__name__}: {exc}"]))
        raise SystemExit(1) from None
    core.run()
