"""`LoadRunner`: sends a plan's requests at their due times, open-loop, and records what came back.

The scheduler is a timer callback, not a task per request: at each due time it writes the request on an
idle keep-alive connection right away. A request held back by the concurrency cap waits in a FIFO and is
sent when a slot frees; its `sent` time is then later than its `scheduled` time and that difference is its
schedule lag - reported, never hidden. Response bytes are stamped on arrival by `HttpConnection`.

A closed-loop plan (`build_closed_plan`) has no due times: `concurrency` requests start at once and each
finish starts the next, after the response's `Retry-After` when it refused the request (429/503), doubled for
each refusal in a row of that slot (at most RETRY_AFTER_CAP_S), so an overloaded server is not hammered with
refusals: 512 slots told "1 s" would otherwise come back 512 times a second. Its requests are sent when
scheduled: no schedule lag. A warm-up (`Warmup`) marks the first requests; the result leaves them out of every figure.
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
from collections.abc import Callable

import orjson

from budgetscope.instrument.client import ClientRequest, ClientTracer
from budgetscope.instrument.traceparent import SAMPLED, format_traceparent, new_span_id, new_trace_id
from budgetscope.loadgen.errors import LoadgenError
from budgetscope.loadgen.http_connection import HttpConnection
from budgetscope.loadgen.plan import Plan
from budgetscope.loadgen.prompts import Prompts
from budgetscope.loadgen.records import RequestRecord
from budgetscope.loadgen.result import LoadResult
from budgetscope.loadgen.server_report import CLIENT_STREAM, header_attributes, timings_attributes
from budgetscope.loadgen.sse import SSEParser, read_chunk
from budgetscope.loadgen.target import Target
from budgetscope.loadgen.warmup import Warmup

CLIENT_WARMUP = "budgetscope.client.warmup"
"""Client span attribute: true on a warm-up request (a sweep leaves it out of its step)."""

_now = time.perf_counter_ns
_LOOKAHEAD = 64  # requests whose bytes are built ahead of their due time, while the loop is idle
_START_DELAY_NS = 20_000_000  # the first request is due this long after setup, so it is not late by setup
_ERROR_BODY_LIMIT = 4096
RETRY_AFTER_CAP_S = 60.0
"""A closed-loop slot never rests longer than this after a refusal, whatever Retry-After says."""


class LoadRunner:
    """Runs one plan against one target.

    `concurrency`: at most this many requests in flight (None: no cap, the load is fully open-loop).
    `connections`: keep-alive connections opened before the start (more are opened as needed).
    `tracer`: a ClientTracer for `llm.client.request` spans (None: no spans; traceparent still sent).
    `spin_us`: poll the loop (instead of sleeping) for the last `spin_us` before a due time. Only useful on
    a loop whose timers are coarse (the default asyncio loop sleeps in whole ms); `run_load` makes a loop
    with precise timers (see event_loop.py), so the default is 0.
    `on_progress`: called about twice a second with the runner (for a live display).
    `sampled=False`: the traceparent's sampled flag is off (`-00`), so that servers that follow their parent's
    sampling export no span of these requests (sweep's pre-flight).
    `warmup`: which requests are warm-up (sent, left out of the figures).
    `duration_s`: closed loop only: no request starts after this many seconds.
    `honour_retry_after`: closed loop only: a slot whose request was refused waits `Retry-After` × 2^(k-1) for its
    k-th refusal in a row (at most RETRY_AFTER_CAP_S) before it starts the next one.
    """

    def __init__(
        self,
        plan: Plan,
        target: Target,
        *,
        concurrency: int | None = None,
        connections: int | None = None,
        tracer: ClientTracer | None = None,
        timeout_s: float = 300.0,
        prompts: Prompts | None = None,
        spin_us: int = 0,
        on_progress: Callable[[LoadRunner], None] | None = None,
        sampled: bool = True,
        warmup: Warmup | None = None,
        duration_s: float | None = None,
        honour_retry_after: bool = True,
    ) -> None:
        if plan.is_closed_loop and concurrency is None:
            concurrency = plan.meta["concurrency"]
        if concurrency is not None and concurrency < 1:
            raise LoadgenError(f"concurrency must be >= 1, got {concurrency}")
        self.plan = plan
        self.target = target
        self.concurrency = concurrency
        self.num_connections = connections if connections is not None else min(concurrency or 8, 256)
        self.tracer = tracer
        self.trace_flags = SAMPLED if sampled else 0  # unsampled: servers that follow the parent record no spans
        self.timeout_s = timeout_s
        self.prompts = prompts or Prompts(plan.seed)
        self.spin_ns = spin_us * 1000
        self.on_progress = on_progress
        self.warmup = warmup or Warmup()
        self.duration_ns = None if duration_s is None else int(duration_s * 1e9)
        self.honour_retry_after = honour_retry_after
        self._resting = 0  # closed loop: slots waiting out a Retry-After
        self._refused_in_a_row: dict[int, int] = {}  # closed loop: request index → its slot's refusals before it
        self.records: list[RequestRecord] = []
        self.in_flight = 0
        self.num_sent = 0
        self.num_finished = 0
        self.num_errors = 0
        self.t0 = 0
        self._payloads: dict[int, bytes] = {}
        self._next = 0
        self._prepared = 0
        self._idle: list[HttpConnection] = []
        self._waiting: collections.deque[int] = collections.deque()
        self._done: asyncio.Future | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unix0 = 0

    async def run(self) -> LoadResult:
        """Send every request of the plan, wait for every response (or its timeout), return the result."""
        self._loop = loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        for _ in range(max(1, self.num_connections)):
            self._idle.append(await self._connect(first=True))
        self.records = [
            RequestRecord(r.index, 0, r.prompt_tokens, r.output_tokens, r.tier, r.tenant, r.prefix_id)
            for r in self.plan.requests
        ]
        self._prepare_from(0)
        unix, mono = time.time_ns(), _now()
        self._unix0 = unix - mono
        self.t0 = _now() + _START_DELAY_NS
        closed = self.plan.is_closed_loop
        if not closed:
            for rec, req in zip(self.records, self.plan.requests):
                rec.scheduled_ns = self.t0 + req.offset_ns
                rec.is_warmup = self.warmup.covers(req.index, req.offset_ns)
        started_unix = self._unix0 + self.t0
        progress = loop.call_later(0.5, self._progress) if self.on_progress else None
        if self.records:
            loop.call_later(_START_DELAY_NS / 1e9 - 0.002, self._start_closed if closed else self._tick)
        else:
            self._done.set_result(None)
        try:
            await self._done
        finally:
            if progress is not None:
                progress.cancel()
            for conn in self._idle:
                conn.close()
        lengths = self.plan.meta.get("prompt_lengths") or {
            "exact": self.prompts.exact,
            "basis": self.prompts.length_basis,
        }
        started = self.records[: self._next] if closed else self.records  # a closed loop's unstarted tail is dropped
        return LoadResult(
            self.plan,
            [r for r in started if not r.is_warmup],
            unix0=self._unix0,
            started_unix_nano=started_unix,
            concurrency=self.concurrency,
            target_url=self.target.url,
            prompt_lengths=lengths,
            warmup_records=[r for r in started if r.is_warmup],
            warmup=str(self.warmup),
        )

    # -- scheduling ------------------------------------------------------------------------------------------
    def _tick(self) -> None:
        requests, records, n = self.plan.requests, self.records, len(self.records)
        i = self._next
        now = _now()
        while i < n and records[i].scheduled_ns <= now:
            self._due(i)
            i += 1
            now = _now()
        self._next = i
        if i >= n:
            return
        if self._prepared - i < _LOOKAHEAD // 2:
            self._prepare_from(i)
        wait = records[i].scheduled_ns - _now()
        if wait <= self.spin_ns:
            self._loop.call_soon(self._tick)
        else:
            self._loop.call_later((wait - self.spin_ns) / 1e9, self._tick)

    def _start_closed(self) -> None:
        """Closed loop: fill every slot."""
        for _ in range(self.concurrency):
            self._closed_next()
        self._check_closed_done()

    def _closed_next(self, refused_in_a_row: int = 0) -> None:
        """Closed loop: start the next request on a free slot, unless the plan or the duration is spent."""
        i = self._next
        if not self._has_more():
            return
        now = _now()
        self._next = i + 1
        if refused_in_a_row:
            self._refused_in_a_row[i] = refused_in_a_row
        rec = self.records[i]
        rec.scheduled_ns = now  # due when its slot frees, and sent then: no schedule lag by definition
        rec.is_warmup = self.warmup.covers(i, now - self.t0)
        self._send(i)

    def _has_more(self) -> bool:
        """Closed loop: whether another request may start now (growing a plan that has no request count)."""
        if self.duration_ns is not None and _now() - self.t0 >= self.duration_ns:
            return False
        if self._next < len(self.records):
            return True
        if self.plan.more is None:
            return False
        new = self.plan.more(_LOOKAHEAD)
        self.plan.requests.extend(new)
        self.records.extend(
            RequestRecord(r.index, 0, r.prompt_tokens, r.output_tokens, r.tier, r.tenant, r.prefix_id) for r in new
        )
        return True

    def _rested(self, refused_in_a_row: int) -> None:
        self._resting -= 1
        self._closed_next(refused_in_a_row)
        self._check_closed_done()

    def _check_closed_done(self) -> None:
        if self.in_flight == 0 and self._resting == 0 and not self._done.done():
            self._done.set_result(None)

    def _prepare_from(self, start: int) -> None:
        """Build the bytes (prompt, body, traceparent) of the requests due next, before they are due."""
        requests, records = self.plan.requests, self.records
        end = min(len(records), start + _LOOKAHEAD)
        for i in range(max(self._prepared, start), end):
            req, rec = requests[i], records[i]
            prompt = req.prompt
            if prompt is None:
                prompt = self.prompts.prompt(
                    req.seed, req.prompt_tokens - req.prefix_tokens, req.prefix_id, req.prefix_tokens
                )
            rec.trace_id, rec.span_id = new_trace_id(), new_span_id()
            body = self.target.body(prompt, req.output_tokens, req.tier, req.tenant)
            self._payloads[i] = self.target.request(
                body, format_traceparent(rec.trace_id, rec.span_id, self.trace_flags), req.tier, req.tenant
            )
        self._prepared = max(self._prepared, end)

    def _due(self, i: int) -> None:
        if self.concurrency is not None and self.in_flight >= self.concurrency:
            self._waiting.append(i)
            return
        self._send(i)

    def _send(self, i: int) -> None:
        if i >= self._prepared:  # a burst outran the look-ahead
            self._prepare_from(i)
        self.in_flight += 1
        idle = self._idle
        while idle and not idle[-1].is_open:
            idle.pop()
        if idle:
            self._write(idle.pop(), i)
        else:
            self._loop.create_task(self._connect_and_send(i))

    async def _connect_and_send(self, i: int) -> None:
        try:
            conn = await self._connect()
        except LoadgenError as err:
            rec = self.records[i]
            rec.error = f"connect_error: {err}"
            rec.end_ns = _now()
            self._payloads.pop(i, None)
            self._finished(None, rec, False)
            return
        self._write(conn, i)

    def _write(self, conn: HttpConnection, i: int) -> None:
        rec = self.records[i]
        exchange = _Exchange(self, conn, rec)
        exchange.timer = self._loop.call_later(self.timeout_s, exchange.time_out)
        rec.sent_ns = _now()
        conn.send(self._payloads.pop(i), exchange)
        self.num_sent += 1

    async def _connect(self, first: bool = False) -> HttpConnection:
        t = self.target
        try:
            _, conn = await asyncio.wait_for(
                self._loop.create_connection(HttpConnection, t.host, t.port, ssl=t.ssl_context()),
                timeout=min(self.timeout_s, 10.0),
            )
        except (OSError, asyncio.TimeoutError) as err:
            errno = getattr(err, "errno", None)
            reason = os.strerror(errno) if errno else str(err) or "timed out"
            raise LoadgenError(f"cannot connect to {t.url}: {reason}") from None
        return conn

    # -- completion ----------------------------------------------------------------------------------------
    def _finished(self, conn: HttpConnection | None, rec: RequestRecord, keep_alive: bool) -> None:
        self.in_flight -= 1
        self.num_finished += 1
        if not rec.is_ok:
            self.num_errors += 1
        if conn is not None:
            if keep_alive and conn.is_open:
                self._idle.append(conn)
            else:
                conn.close()
        if self.tracer is not None:
            self.tracer.record(self._client_request(rec))
        if self.plan.is_closed_loop:
            self._closed_after(rec)
            return
        if self._waiting:
            self._send(self._waiting.popleft())
        if self.num_finished == len(self.records) and not self._done.done():
            self._done.set_result(None)

    def _closed_after(self, rec: RequestRecord) -> None:
        """Closed loop: the finished request's slot starts the next one, after a refusal's Retry-After (doubled for
        each refusal in a row)."""
        before = self._refused_in_a_row.pop(rec.index, 0)
        rest_s = rec.retry_after_s if self.honour_retry_after else None
        if rest_s and self._has_more():
            rest_s = min(rest_s * 2**before, RETRY_AFTER_CAP_S)
            if self.duration_ns is not None:  # a rest past the end of the run only delays its end
                rest_s = min(rest_s, (self.t0 + self.duration_ns - _now()) / 1e9)
            self._resting += 1
            self._loop.call_later(max(rest_s, 0.0), self._rested, before + 1)
        else:
            self._closed_next()
        self._check_closed_done()

    def _client_request(self, rec: RequestRecord) -> ClientRequest:
        u = self._unix0
        sent = rec.sent_ns if rec.sent_ns is not None else rec.end_ns
        return ClientRequest(
            rec.trace_id,
            rec.span_id,
            scheduled_ns=u + rec.scheduled_ns,
            start_ns=u + sent,
            end_ns=u + rec.end_ns,
            first_token_ns=None if rec.first_token_ns is None else u + rec.first_token_ns,
            itl_ms=tuple(rec.itl_ms),
            status_code=rec.status,
            output_tokens=rec.output_tokens,
            input_tokens=rec.input_tokens,
            tier=rec.tier,
            tenant=rec.tenant,
            model=self.target.model,
            error_type=None if rec.error is None else rec.outcome,
            url=self.target.url,
            operation="chat" if self.target.api == "chat" else "text_completion",
            extra_attributes={
                CLIENT_STREAM: self.target.stream,
                **(rec.server_attributes or {}),
                **({CLIENT_WARMUP: True} if rec.is_warmup else {}),
            },
        )

    def _progress(self) -> None:
        self.on_progress(self)
        if not self._done.done():
            self._loop.call_later(0.5, self._progress)


class _Exchange:
    """One request on the wire: turns response events into its record, then tells the runner."""

    __slots__ = ("runner", "conn", "rec", "sse", "is_stream", "body_parts", "timer", "timed_out")

    def __init__(self, runner: LoadRunner, conn: HttpConnection, rec: RequestRecord) -> None:
        self.runner = runner
        self.conn = conn
        self.rec = rec
        self.sse = SSEParser()
        self.is_stream = False
        self.body_parts: list[bytes] = []
        self.timer: asyncio.TimerHandle | None = None
        self.timed_out = False

    def head(self, status: int, headers: dict[bytes, bytes]) -> None:
        self.rec.status = status
        if status in (429, 503):
            self.rec.retry_after_s = _seconds(headers.get(b"retry-after"))
        reported = header_attributes(headers)
        if reported:
            self.rec.server_attributes = reported
        self.is_stream = status == 200 and headers.get(b"content-type", b"").startswith(b"text/event-stream")

    def body(self, data: bytes, t_ns: int) -> None:
        if not self.is_stream:
            if sum(map(len, self.body_parts)) < _ERROR_BODY_LIMIT:
                self.body_parts.append(data)
            return
        rec = self.rec
        for payload in self.sse.feed(data):
            chunk = read_chunk(payload)
            if chunk.is_token:
                if rec.first_token_ns is None:
                    rec.first_token_ns = t_ns
                rec.token_ns.append(t_ns)
            if chunk.completion_tokens is not None:
                rec.output_tokens = chunk.completion_tokens
            if chunk.prompt_tokens is not None:
                rec.input_tokens = chunk.prompt_tokens
            if chunk.timings is not None:
                self._reported(timings_attributes(chunk.timings))
            if chunk.is_done:
                rec.is_done = True
            if chunk.error is not None and rec.error is None:
                rec.error = chunk.error

    def complete(self, t_ns: int, keep_alive: bool) -> None:
        rec = self.rec
        rec.end_ns = t_ns
        if self.is_stream:
            if rec.output_tokens is None:
                rec.output_tokens = len(rec.token_ns)
            if not rec.is_done and rec.error is None:
                rec.error = "incomplete_stream: the stream ended without data: [DONE]"
        else:
            self._read_plain_body()
        self._end(keep_alive)

    def fail(self, error: str, t_ns: int) -> None:
        rec = self.rec
        rec.end_ns = t_ns
        if rec.output_tokens is None and rec.token_ns:
            rec.output_tokens = len(rec.token_ns)
        if rec.error is None:
            rec.error = f"timeout: no complete response after {self.runner.timeout_s:g} s" if self.timed_out else error
        self._end(False)

    def time_out(self) -> None:
        self.timed_out = True
        self.conn.close()  # connection_lost -> fail()

    def _end(self, keep_alive: bool) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.runner._finished(self.conn, self.rec, keep_alive)

    def _reported(self, attrs: dict) -> None:
        if attrs:
            self.rec.server_attributes = (self.rec.server_attributes or {}) | attrs

    def _read_plain_body(self) -> None:

        rec = self.rec
        raw = b"".join(self.body_parts)
        try:
            obj = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            obj = None
        if rec.status == 200:
            if isinstance(obj, dict):
                self._reported(timings_attributes(obj.get("timings")))
            usage = obj.get("usage") if isinstance(obj, dict) else None
            if usage:
                rec.output_tokens = usage.get("completion_tokens")
                rec.input_tokens = usage.get("prompt_tokens")
            rec.error = None if obj is not None else "bad_response: 200 without an event stream or JSON body"
            return
        message = None
        if isinstance(obj, dict):
            err = obj.get("error", obj.get("detail", obj.get("message")))
            message = err.get("message") if isinstance(err, dict) else err
        if message is None:
            message = raw[:200].decode("utf-8", "replace").strip() or "(empty body)"
        rec.error = f"http_{rec.status}: {message}"


def _seconds(value: bytes | None) -> float | None:
    """A Retry-After in seconds; None when absent or an HTTP date (not worth a clock comparison here)."""
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None
