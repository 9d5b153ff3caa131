"""`OtlpHttpReceiver`: OTLP/HTTP `POST /v1/traces` and `POST /v1/metrics` (GPU samples; protobuf or JSON,
gzip/deflate), and `POST /v1/budgetscope/scrapes` (a `/metrics` scrape that `budgetscope scrape` or `import` sends
to the collector writing its archive: collector/endpoint.py), on one asyncio event loop: a connection costs a few
kilobytes, never a thread.

Statuses follow the OTLP/HTTP spec: 200 with an `ExportTraceServiceResponse` in the request's encoding once the
batch is in the archive; 400 (bad framing or body), 401 (missing or wrong bearer token), 413 (too large), 415
(media type / encoding), 404/405, 431 (headers too large), 501 (a transfer coding other than chunked), 505 —
none of them retried by clients; 429 (pending bytes at their limit) and 503 (shutting down, archive failure,
too many connections) with `Retry-After`, which clients retry. Every error body is a `google.rpc.Status` in the
request's encoding. The request line, headers and chunked framing are parsed strictly (`http_framing`: RFC
9112); a request whose framing is refused is answered and its connection closed.

Abuse bounds: at most `max_connections` open connections; when they are all open a new one takes the slot of
the connection that has made no progress for longest (silent, idle between requests, or a body that moved no
byte for SLOT_STALL_S), and only when every slot is making progress is it answered 503 and closed. A new
connection's first request line and headers must arrive whole within HEADER_TIMEOUT_S of the connection (later
ones within HEADER_TIMEOUT_S of their first byte) and within MAX_HEADER_BYTES; a body that moves no byte for
BODY_STALL_S is cut; a connection idle between requests for IDLE_TIMEOUT_S is closed. Bodies are bounded before
they are read (Content-Length, and each chunk's size, against `max_message_bytes`), as they arrive (each read is
reserved in the pending-bytes budget before it is kept: a declared length reserves nothing; chunked bodies count
too) and while they are inflated (`inflate`: at most `max_message_bytes` each and twice that together, the
largest giving way to smaller ones; at most 64 gzip members; in steps that bodies inflating together take in
turn). Requests are answered one at a time, and the next is read only once the answers so far have left (at most
WRITE_BUFFER_BYTES of them wait for a peer that does not read; SEND_STALL_S later the connection is cut):
pipelined requests whose answers are never read hold no more than that.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import logging
import socket
import ssl
import termios
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import orjson

from budgetscope.auth import bearer_ok
from budgetscope.collector import endpoint, self_metrics
from budgetscope.collector import status as st
from budgetscope.collector.http_framing import (
    MAX_HEADER_BYTES,
    MAX_HEADER_LINES,
    FramingError,
    RequestHead,
    check_chunk_count,
    chunk_size,
    field_lines,
    parse_head,
)
from budgetscope.collector.inflate import Busy, InflateError, InflatePool, Inflater, check_encoding
from budgetscope.collector.pending import Hold, Outcome, PendingQueue

log = logging.getLogger("budgetscope.collector")

TRACES_PATH = "/v1/traces"
METRICS_PATH = "/v1/metrics"
STATUS_PATH = "/status"  # GET: the collector's counts and the spans no adapter claimed, as JSON
FORMATS = {"application/x-protobuf": "otlp-proto", "application/json": "otlp-json"}
METRICS_FORMATS = {"otlp-proto": "otlp-metrics-proto", "otlp-json": "otlp-metrics-json"}

SUCCESS_BODY = {"otlp-proto": b"", "otlp-json": b"{}"}  # an empty Export{Trace,Metrics}ServiceResponse
CONTENT_TYPE = {"otlp-proto": "application/x-protobuf", "otlp-json": "application/json"}
ERROR_STATUS = {Outcome.REJECTED: 400, Outcome.BUSY: 429, Outcome.CLOSED: 503, Outcome.FAILED: 503}
RETRYABLE = (429, 503)  # the statuses that carry Retry-After
RPC_CODE = {401: st.UNAUTHENTICATED, 429: st.RESOURCE_EXHAUSTED, 503: st.UNAVAILABLE, 500: st.INTERNAL}
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}
IDLE_TIMEOUT_S = 60.0  # a connection that moves no byte this long (between or within requests) is closed
HEADER_TIMEOUT_S = 10.0  # a request line and headers must arrive whole this soon (after connect, or first byte)
BODY_STALL_S = 10.0  # a body that moves no byte this long is cut (and sooner, if its bytes are needed)
SLOT_STALL_S = 2.0  # a body that moved no byte this long may lose its connection's slot to a new connection
SEND_STALL_S = 10.0  # answers a peer leaves unread this long (past WRITE_BUFFER_BYTES): the connection is cut
WRITE_BUFFER_BYTES = 64 << 10  # answers waiting for a peer to read them; past it, no further request is read
MIN_BODY_RATE = 64 << 10  # bytes/s: a body must arrive within HEADER_TIMEOUT_S + its size at this rate
READ_CHUNK = 1 << 20
DRAIN_MAX_BYTES = 1 << 20  # a refused body with at most this much left is read to its end (keep-alive 429)
LINGER_S = 1.0  # after an early answer, what the peer still sends is read and dropped this long, then close
LINGER_MAX_BYTES = 256 << 10  # ...and at most this much: more is a sender that a reset will stop sooner
BACKLOG = 1024  # connections the kernel completes before they are accepted
DECOMPRESS_WORKERS = 2  # inflating a body (up to max_message_bytes) runs off the event loop, a step a job


class _Closed(Exception):
    """The connection ended (peer gone, timed out, or closed by the receiver)."""


class _Refused(Exception):
    """A body the budget refused, too long to read to its end: answer at once and close."""


class _Body:
    """One request body as it arrives: its parts, each counted in `hold` before it is kept. Once the budget
    refuses a part (`refused`), what was held is given back; the rest is read without being kept when at most
    DRAIN_MAX_BYTES of it are left (the 429 then leaves the connection open), else the request ends there."""

    __slots__ = ("queue", "hold", "until", "left", "parts", "refused")

    def __init__(self, queue: PendingQueue, hold: Hold, until: float, declared: int | None):
        self.queue = queue
        self.hold = hold
        self.until = until  # monotonic s: the whole body must have arrived by then
        self.left = declared  # bytes still to come; None: chunked (unknown)
        self.parts: list[bytes] = []
        self.refused: Outcome | None = None

    def add(self, part: bytes, is_last: bool) -> None:
        """Keep `part` if the budget takes it (`is_last`: it makes the body whole). _Refused once refused with
        more than DRAIN_MAX_BYTES (or an unknown length) still to come: reading it all would only cost time."""
        if self.left is not None:
            self.left -= len(part)
        if self.refused is None and (refused := self.queue.grow(self.hold, len(part), is_last)):
            self.refused = refused
            self.queue.drop(self.hold)
            self.parts.clear()
        if self.refused is None:
            self.parts.append(part)
        elif self.left is None or self.left > DRAIN_MAX_BYTES:
            raise _Refused


class _Connection:
    """One client connection: reads requests one after another and answers each (HTTP/1.1 keep-alive)."""

    __slots__ = (
        "receiver",
        "reader",
        "writer",
        "peer",
        "deadline",
        "moved",
        "is_busy",
        "is_waiting",
        "is_lingering",
        "is_body_read",
    )

    def __init__(self, receiver: OtlpHttpReceiver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.receiver = receiver
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername") or ("?", 0)
        self.peer = f"{peer[0]}:{peer[1]}"
        self.deadline = time.monotonic() + HEADER_TIMEOUT_S  # the sweeper closes the connection past it
        self.moved = time.monotonic()  # when the peer last made progress (connected, sent bytes, got an answer)
        self.is_busy = False  # a request between its headers and its answer
        self.is_waiting = False  # a request whose body is whole: being inflated or waiting for the writer
        self.is_lingering = False  # answered before its body was read: drain a little before closing
        self.is_body_read = False  # the current request's body was read to its end
        writer.transport.set_write_buffer_limits(high=WRITE_BUFFER_BYTES)

    async def serve(self) -> None:
        try:
            is_more = await self._one_request(is_first=True)
            while is_more:
                await self._flush()
                # pipelined requests already read answer without a pause: let the other connections have a turn
                await asyncio.sleep(0)
                is_more = await self._one_request()
        except (_Closed, ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, OSError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a bug must cost one connection and one line, never the loop
            log.error("http %s: internal error, connection closed: %s: %s", self.peer, type(e).__name__, e)
            log.debug("http %s: internal error", self.peer, exc_info=True)
            if not self.writer.is_closing():
                self.writer.write(error_response(500, "otlp-proto", "internal error", 0, close=True))
        finally:
            if self.is_lingering:
                await self._linger()
            self.writer.close()

    async def _flush(self) -> None:
        """Before reading the next request: the answers so far must have left (at most WRITE_BUFFER_BYTES wait
        for the peer); a peer that reads none of them for SEND_STALL_S is cut by the sweeper."""
        if self.writer.transport.get_write_buffer_size() > WRITE_BUFFER_BYTES:
            self.deadline = time.monotonic() + SEND_STALL_S
            await self.writer.drain()
            self._progress(IDLE_TIMEOUT_S)

    async def _linger(self) -> None:
        """Half-close, then read and drop what the peer still sends for up to LINGER_S (and LINGER_MAX_BYTES):
        closing on unread bytes resets the connection, and the peer might never read its answer."""
        self.deadline = min(self.deadline, time.monotonic() + LINGER_S)
        try:
            if self.writer.can_write_eof():
                self.writer.write_eof()
            async with asyncio.timeout(LINGER_S):
                left = LINGER_MAX_BYTES
                while left > 0 and (part := await self.reader.read(min(left, READ_CHUNK))):
                    left -= len(part)
        except (TimeoutError, ConnectionError, ssl.SSLError, OSError):
            pass

    # -- reading ---------------------------------------------------------------------------------------------
    def _unread(self) -> int:
        """Bytes the peer sent that the collector has not read yet: in the reader's buffer and in the socket
        (FIONREAD). Any thread; 0 if the socket cannot say."""
        waiting = len(getattr(self.reader, "_buffer", b""))  # asyncio.StreamReader's buffer: no public size
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            try:
                count = array.array("i", [0])
                fcntl.ioctl(sock.fileno(), termios.FIONREAD, count)
                waiting += count[0]
            except (OSError, ValueError):
                pass
        return waiting

    def _progress(self, deadline_s: float) -> None:
        """The peer moved: it may now stay silent `deadline_s` (or until the body's own deadline, if sooner)."""
        self._touch()
        self.deadline = self.moved + deadline_s

    def _touch(self) -> None:
        """Note progress now; the receiver keeps its connections in this order (the idlest first)."""
        self.moved = time.monotonic()
        if self in self.receiver._connections:
            self.receiver._connections.move_to_end(self)

    async def _head(self, is_first: bool) -> bytes | None:
        """The request line and headers; None when the peer closed between requests. The first request of a
        connection has HEADER_TIMEOUT_S from the connect, later ones IDLE_TIMEOUT_S to start. Empty lines
        before the request line are skipped (RFC 9112 2.2: a client may send a CRLF after a body)."""
        if not is_first:
            self.deadline = time.monotonic() + IDLE_TIMEOUT_S
        first = await self.reader.read(1)
        if not first:
            return None
        if not is_first:
            self._progress(HEADER_TIMEOUT_S)  # from the first byte: whole headers, soon
        try:
            head = first + await self.reader.readuntil(b"\r\n\r\n")
            while head.startswith(b"\r\n"):
                head = head[2:]
            if not head:  # empty lines alone: the request line still to come
                head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise FramingError(431, f"request headers exceed {MAX_HEADER_BYTES:,} bytes") from None
        except asyncio.IncompleteReadError:
            raise _Closed from None
        self._touch()
        return head

    async def _receive(self, n: int, body: _Body, is_whole: bool = False) -> int:
        """Read up to `n` (> 0) bytes of `body`; `is_whole`: `n` bytes make it whole. How many were read."""
        part = await self.reader.read(min(n, READ_CHUNK))
        if not part:
            raise FramingError(400, "body ended before it was complete")
        self._progress(BODY_STALL_S)
        self.deadline = min(self.deadline, body.until)
        body.add(part, is_whole and len(part) == n)
        return len(part)

    async def _read_exactly(self, n: int, body: _Body, is_whole: bool = False) -> None:
        """`n` (>= 0) bytes of `body`; `is_whole`: they end it."""
        left = n
        while left > 0:
            left -= await self._receive(left, body, is_whole)

    async def _framing(self, read) -> bytes:
        """A piece of a chunked body's framing (`read` is a coroutine of the reader); a peer that closes
        inside the body gets 400."""
        try:
            return await read
        except asyncio.LimitOverrunError:
            raise FramingError(400, f"a chunked body's line over {MAX_HEADER_BYTES:,} bytes") from None
        except asyncio.IncompleteReadError:
            raise FramingError(400, "body ended before it was complete") from None

    async def _read_chunked(self, limit: int, body: _Body) -> None:
        """A chunked body's data, each chunk counted as it arrives, at most `limit` bytes in all; the framing
        (RFC 9112 7.1: sizes, extensions, CRLFs, trailers) is checked strictly and not kept."""
        data = chunks = 0
        while True:
            size = chunk_size(await self._framing(self.reader.readuntil(b"\n")))
            chunks += 1
            check_chunk_count(chunks, data)
            if size == 0:
                break
            if data + size > limit:
                raise FramingError(413, f"chunked body exceeds {limit:,} bytes")
            await self._read_exactly(size, body)
            data += size
            if await self._framing(self.reader.readexactly(2)) != b"\r\n":
                raise FramingError(400, "chunk data not followed by CRLF")
        trailers, nbytes = [], 0
        while (line := await self._framing(self.reader.readuntil(b"\n"))) != b"\r\n":
            nbytes += len(line)
            if nbytes > MAX_HEADER_BYTES or len(trailers) >= MAX_HEADER_LINES:
                raise FramingError(431, f"trailers exceed {MAX_HEADER_LINES} lines or {MAX_HEADER_BYTES:,} bytes")
            if not line.endswith(b"\r\n"):
                raise FramingError(400, "a trailer line not ended by CRLF")
            trailers.append(line[:-2])
        field_lines(trailers, "trailer")  # checked, then dropped: nothing of a trailer is used

    # -- one request -------------------------------------------------------------------------------------------
    async def _one_request(self, is_first: bool = False) -> bool:
        """Read and answer one request; False when the connection is to be closed."""
        r = self.receiver
        try:
            head = await self._head(is_first)
            if head is None:
                return False
            req = parse_head(head)
        except FramingError as e:
            return self._error(e.status, "otlp-proto", str(e), close=True)
        self.is_busy = True
        self.is_body_read = not req.has_body
        r.num_requests += 1
        try:
            keep = await self._dispatch(req, urlsplit(req.target).path)
            if not self.is_body_read:  # answered without reading its body: the framing is lost with it
                self.is_lingering = True
                return False
            return keep and req.keep_alive
        finally:
            self.is_busy = False
            self._progress(IDLE_TIMEOUT_S)
            log.debug("http %s: %s %s", self.peer, req.method, req.target)

    async def _dispatch(self, req: RequestHead, path: str) -> bool:
        r = self.receiver
        method, headers = req.method, req.headers
        fmt = FORMATS.get(headers.get("content-type", "").split(";")[0].strip().lower())
        if method == "GET" and path == self_metrics.METRICS_PATH and r.self_metrics is not None:
            return self._self_metrics(headers)
        if (method, path) == ("GET", STATUS_PATH) and r.status is not None:
            return await self._status(headers)
        if method != "POST":
            return self._error(
                405 if path in r.paths else 404,
                fmt or "otlp-proto",
                f"only POST {TRACES_PATH} is served here",
                close=True,
            )
        if path not in r.paths:
            return self._error(
                404, fmt or "otlp-proto", f"no such endpoint; OTLP traces go to POST {TRACES_PATH}", close=True
            )
        if not bearer_ok(headers.get("authorization"), r.token):
            return self._error(
                401, fmt or "otlp-proto", "missing or wrong bearer token (Authorization: Bearer …)", close=True
            )
        if fmt is None:
            return self._error(
                415,
                "otlp-proto",
                f"unsupported Content-Type {headers.get('content-type', '')[:64] or 'none'!r} "
                "(use application/x-protobuf or application/json)",
                close=True,
            )
        if path == endpoint.SCRAPES_PATH:  # a `/metrics` scrape from `budgetscope scrape` or `import`, as JSON
            if fmt != "otlp-json":
                return self._error(415, "otlp-json", f"a scrape is {endpoint.SCRAPE_CONTENT_TYPE}", close=True)
            return await self._export(req, fmt, endpoint.SCRAPE_FORMAT)
        return await self._export(req, fmt, METRICS_FORMATS[fmt] if path == METRICS_PATH else fmt)

    async def _export(self, req: RequestHead, fmt: str, batch_format: str) -> bool:
        """`fmt`: the body's encoding (for the answer); `batch_format`: what the archive is told it holds."""
        r = self.receiver
        if not req.is_chunked and "content-length" not in req.headers:
            return self._error(411, fmt, "a Content-Length (or chunked body) is required", close=True)
        declared = req.length
        if declared is not None and declared > r.max_message_bytes:
            return self._error(
                413,
                fmt,
                f"body of {req.headers['content-length'][:24]} bytes exceeds {r.max_message_bytes:,}",
                close=True,
            )
        encoding = req.headers.get("content-encoding", "").strip().lower()
        try:
            check_encoding(encoding)  # before a byte of the body is read
        except InflateError as e:
            return self._error(e.status, fmt, str(e), close=True)
        # the whole body must arrive by then, and each read within BODY_STALL_S of the last
        until = time.monotonic() + HEADER_TIMEOUT_S + (declared or r.max_message_bytes) / MIN_BODY_RATE
        self._progress(BODY_STALL_S)
        self.deadline = min(self.deadline, until)
        if req.version == "HTTP/1.1" and req.has_body and req.headers.get("expect", "").lower() == "100-continue":
            # every check a head allows has passed: the client (curl with a large file) may send the body now
            # instead of waiting a second for an answer that would never come (RFC 9110, 10.1.1)
            self.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        hold = r.queue.open_hold(on_evict=lambda: r.call_soon(self.writer.transport.abort), unread=self._unread)
        body = _Body(r.queue, hold, until, declared)
        try:
            try:
                await (
                    self._read_chunked(r.max_message_bytes, body)
                    if declared is None
                    else self._read_exactly(declared, body, is_whole=True)
                )
            except FramingError as e:
                return self._error(e.status, fmt, str(e), close=True)
            except _Refused:
                self.is_lingering = True
                self.is_body_read = True  # lingering stands for the rest
                return self._outcome(body.refused, fmt, "", close=True)
            self.is_body_read = True
            reserved = r.queue.settle(hold)
            if hold.is_evicted:  # stalled before its last byte, and its bytes went to another request
                return self._outcome(Outcome.BUSY, fmt, "", close=True)
            if body.refused:  # read to its end (nothing kept): the connection can be reused
                return self._outcome(body.refused, fmt, "")
            self.is_waiting = True  # whole: inflated and answered in bounded time, never cut by the sweeper
            # a file `budgetscope import` sent keeps its path as the batch's origin (header `x-budgetscope-origin`)
            origin = req.headers.get(endpoint.ORIGIN_HEADER) or "otlp-http"
            return await self._land(body.parts, fmt, batch_format, encoding, reserved, origin)
        finally:
            self.is_waiting = False
            r.queue.drop(hold)  # whatever is still held when no ticket took it

    async def _land(
        self, parts: list[bytes], fmt: str, batch_format: str, encoding: str, reserved: int, origin: str
    ) -> bool:
        """Inflate a whole body (its `reserved` bytes already held), hand it to the writer, answer its outcome.
        What it held is given back before a refusal is answered: whoever sees the answer sees the bytes free."""
        r = self.receiver
        try:
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            del parts[:]
            if encoding in ("", "identity"):
                payload = body
            else:
                try:
                    payload = await self._inflate(body, encoding)
                except (InflateError, Busy) as e:
                    r.queue.release(reserved)
                    reserved = 0
                    if isinstance(e, Busy):
                        return self._outcome(Outcome.BUSY, fmt, "")
                    return self._error(e.status, fmt, str(e), close=True)
                finally:
                    del body
                if len(payload) > reserved:  # grow the reservation to what will sit in memory
                    if refused := r.queue.reserve(len(payload) - reserved):
                        r.queue.release(reserved)
                        reserved = 0
                        return self._outcome(refused, fmt, "")
                    reserved = len(payload)
            done = asyncio.get_running_loop().create_future()
            ticket = r.queue.submit_nowait(
                payload, batch_format, origin, self.peer, reserved, on_done=lambda: r.call_soon(_set_done, done)
            )
            reserved = 0  # released by the writer (or by submit_nowait, when closed)
            del payload
            if not ticket.wait(0):
                await done
            return self._outcome(ticket.outcome, fmt, ticket.error, rejected_spans=ticket.rejected_spans)
        finally:
            if reserved:
                r.queue.release(reserved)

    async def _inflate(self, body: bytes, encoding: str) -> bytes:
        """`body` inflated, a step a job: bodies inflating together take turns on the pool, step by step.
        InflateError, or Busy when its output gave way to smaller ones."""
        r = self.receiver
        inflater = Inflater(body, encoding, r.max_message_bytes, r.inflating)
        loop = asyncio.get_running_loop()
        try:
            while not await loop.run_in_executor(r.inflaters, inflater.step):
                pass
        finally:
            r.inflating.release(inflater)
        payload, inflater.output = inflater.output, b""
        return payload

    def _self_metrics(self, headers: dict[str, str]) -> bool:
        """The collector's own figures in Prometheus text (behind the bearer token too, when one is set)."""
        if not bearer_ok(headers.get("authorization"), self.receiver.token):
            return self._error(401, "otlp-proto", "missing or wrong bearer token (Authorization: Bearer …)", close=True)
        body = self.receiver.self_metrics()
        self.writer.write(
            (
                f"HTTP/1.1 200 OK\r\nServer: budgetscope-collector\r\nContent-Type: "
                f"{self_metrics.CONTENT_TYPE}\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body
        )
        return True

    # -- answering ---------------------------------------------------------------------------------------------
    def _outcome(self, outcome: Outcome, fmt: str, error: str, close: bool = False, rejected_spans: int = 0) -> bool:
        if outcome is Outcome.LANDED:
            encode = st.partial_success_json if fmt == "otlp-json" else st.partial_success_proto
            return self._send(200, fmt, encode(rejected_spans, error) if rejected_spans else SUCCESS_BODY[fmt])
        message = error or {
            Outcome.BUSY: "the collector is busy (pending bytes at their limit); retry later",
            Outcome.CLOSED: "the collector is shutting down; retry later",
        }.get(outcome, "")
        return self._error(ERROR_STATUS[outcome], fmt, message, close=close or outcome is Outcome.CLOSED)

    def _error(self, status: int, fmt: str, message: str, close: bool = False) -> bool:
        self.writer.write(error_response(status, fmt, message, self.receiver.retry_after_s, close))
        return not close

    async def _status(self, headers: dict[str, str]) -> bool:
        """GET /status: the collector's `status()` as JSON, off the event loop (it reads the archive)."""
        r = self.receiver
        if not bearer_ok(headers.get("authorization"), r.token):
            return self._error(401, "otlp-json", "missing or wrong bearer token (Authorization: Bearer …)", close=True)
        doc = await asyncio.get_running_loop().run_in_executor(r.status_pool, r.status)
        return self._send(200, "otlp-json", orjson.dumps(doc))

    def _send(self, status: int, fmt: str, body: bytes) -> bool:
        self.writer.write(response(status, fmt, body))
        return True


def _set_done(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


def response(status: int, fmt: str, body: bytes, extra: str = "") -> bytes:
    """A whole HTTP/1.1 response in one buffer (one write: nothing waits on Nagle or a delayed ACK)."""
    return (
        f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\nServer: budgetscope-collector\r\n"
        f"Content-Type: {CONTENT_TYPE[fmt]}\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def error_response(status: int, fmt: str, message: str, retry_after_s: float, close: bool) -> bytes:
    encode = st.status_json if fmt == "otlp-json" else st.status_proto
    extra = f"Retry-After: {max(1, round(retry_after_s))}\r\n" if status in RETRYABLE else ""
    if status == 401:
        extra += 'WWW-Authenticate: Bearer realm="budgetscope"\r\n'
    if close:
        extra += "Connection: close\r\n"
    return response(status, fmt, encode(RPC_CODE.get(status, st.INVALID_ARGUMENT), message), extra)


class OtlpHttpReceiver:
    """Serves OTLP/HTTP on (host, port) on its own thread (one asyncio loop); port 0 picks a free port (see
    `.port`). `ssl_context`: serve HTTPS. `token`: every request must carry `Authorization: Bearer <token>`.
    `self_metrics`: what `GET /metrics` answers (None: 404)."""

    def __init__(
        self,
        host: str,
        port: int,
        queue: PendingQueue,
        max_message_bytes: int,
        retry_after_s: float,
        metrics: bool = False,
        *,
        max_connections: int = 512,
        ssl_context: ssl.SSLContext | None = None,
        token: str | None = None,
        status=None,
        self_metrics: Callable[[], bytes] | None = None,
    ):
        self.queue = queue
        self.status = status  # a callable returning the JSON-able document of GET /status; None: not served
        self.self_metrics = self_metrics  # GET /metrics: the collector's own figures (Prometheus text)
        # metrics: GPU samples, opt-in; scrapes: `budgetscope scrape` and `import` into the archive it writes
        self.paths = (TRACES_PATH, endpoint.SCRAPES_PATH) + ((METRICS_PATH,) if metrics else ())
        self.max_message_bytes = max_message_bytes
        self.retry_after_s = retry_after_s
        self.max_connections = max_connections
        self.ssl_context = ssl_context
        self.token = token
        self.num_requests = 0
        self.num_refused_connections = 0  # over max_connections: answered 503 and closed
        self.num_timed_out = 0  # closed by the sweeper (idle, headers too slow, body stalled)
        self.num_evicted_connections = 0  # closed to give their slot to a new connection (see `_victim`)
        self.inflaters = ThreadPoolExecutor(DECOMPRESS_WORKERS, thread_name_prefix="budgetscope-otlp-http-inflate")
        # the output of the bodies being inflated, together: twice the largest body
        self.inflating = InflatePool(2 * max_message_bytes + 2)
        # GET /status reads the archive: on a thread of its own, so that it never delays an inflation
        self.status_pool = ThreadPoolExecutor(1, thread_name_prefix="budgetscope-otlp-http-status")
        # oldest progress first (see `_Connection._touch`): the first one that may lose its slot is found at once
        self._connections: OrderedDict[_Connection, None] = OrderedDict()
        # SO_REUSEADDR: a restart after a crash binds past the old socket's TIME_WAIT at
        # once. On Linux it does not let two listeners share a port (that is SO_REUSEPORT, left off).
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))  # OSError if the port is taken
            self._sock.listen(BACKLOG)
        except OSError:
            self._sock.close()
            raise
        self.port: int = self._sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="budgetscope-otlp-http", daemon=True)

    @property
    def num_connections(self) -> int:
        return len(self._connections)

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def call_soon(self, fn, *args) -> None:
        """Run `fn(*args)` on the receiver's loop (from any thread); nothing once the loop has closed."""
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass

    def stop_accepting(self, grace_s: float) -> None:
        """Close the listening socket; connections already open are still answered (503 once the queue is
        closed). `grace_s` is unused: `close` bounds the wait."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._close_listener(), self._loop).result(10)
        else:
            self._sock.close()

    def close(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for requests in progress to be answered, then drop every connection."""
        deadline = time.monotonic() + timeout_s
        while self._thread.is_alive() and self._any_busy():
            if time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        if self._thread.is_alive():
            self.call_soon(self._stop.set)
            self._thread.join(10)
        self.inflaters.shutdown(wait=False)
        self.status_pool.shutdown(wait=False)

    def _any_busy(self) -> bool:
        """Whether a request is in progress; read from another thread while the loop may reorder the
        connections (then: ask again)."""
        try:
            return any(c.is_busy for c in list(self._connections))
        except RuntimeError:  # mutated during the copy
            return True

    # -- the loop thread ---------------------------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        tls = {"ssl": self.ssl_context, "ssl_handshake_timeout": HEADER_TIMEOUT_S} if self.ssl_context else {}
        try:
            # asyncio listens again with its own backlog (100 by default): a burst of connections past it has
            # its handshakes dropped, and a real exporter among them waits a second for its SYN to be retried
            self._server = await asyncio.start_server(
                self._accept, sock=self._sock, limit=MAX_HEADER_BYTES, backlog=BACKLOG, **tls
            )
        finally:
            self._started.set()
        sweeper = asyncio.ensure_future(self._sweep())
        await self._stop.wait()
        sweeper.cancel()
        await self._close_listener()
        for c in list(self._connections):
            c.writer.transport.abort()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in handlers:
            t.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    async def _close_listener(self) -> None:
        if self._server is not None and self._server.is_serving():
            self._server.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self.max_connections and (victim := self._victim()) is not None:
            self.num_evicted_connections += 1
            del self._connections[victim]  # its slot is the new connection's from now
            victim.writer.transport.abort()
        if len(self._connections) >= self.max_connections:
            self.num_refused_connections += 1
            writer.write(
                error_response(
                    503,
                    "otlp-proto",
                    f"too many connections (the limit is {self.max_connections:,}); retry later",
                    self.retry_after_s,
                    True,
                )
            )
            writer.close()
            return
        conn = _Connection(self, reader, writer)
        self._connections[conn] = None
        try:
            await conn.serve()
        except asyncio.CancelledError:  # the receiver is closing: the connection was already dropped
            pass
        finally:
            self._connections.pop(conn, None)

    def _victim(self) -> _Connection | None:
        """The connection that has gone longest without progress and may lose its slot: one that is silent,
        idle between requests, sending its headers, or whose body moved no byte for SLOT_STALL_S; never one
        whose body is whole (it is waiting for its answer). None when every slot is making progress."""
        stalled_before = time.monotonic() - SLOT_STALL_S
        return next(
            (c for c in self._connections if not c.is_waiting and (not c.is_busy or c.moved <= stalled_before)), None
        )

    async def _sweep(self) -> None:
        """Once a second: close the connections past their deadline (idle, headers too slow, body stalled).
        A request waiting for its answer is never closed."""
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for c in list(self._connections):
                if not c.is_waiting and now > c.deadline:
                    self.num_timed_out += 1
                    c.writer.transport.abort()
