"""`HttpConnection`: one HTTP/1.1 keep-alive connection, an asyncio protocol that parses responses as
bytes arrive and stamps each piece of body with `perf_counter_ns()` at arrival.

Lean on purpose: the load generator must send hundreds of requests a second with sub-millisecond
scheduling error on two cores. One request at a time per connection (no pipelining); responses with
`Transfer-Encoding: chunked`, `Content-Length`, or read-until-close bodies.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _LENGTH, _UNTIL_CLOSE, _IDLE = range(8)
_now = time.perf_counter_ns


class ResponseHandler(Protocol):
    """Receives one response's events from a connection."""

    def head(self, status: int, headers: dict[bytes, bytes]) -> None: ...
    def body(self, data: bytes, t_ns: int) -> None: ...
    def complete(self, t_ns: int, keep_alive: bool) -> None: ...
    def fail(self, error: str, t_ns: int) -> None: ...


class HttpConnection(asyncio.Protocol):
    """An HTTP/1.1 client connection carrying one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.is_open = False
        self._handler: ResponseHandler | None = None
        self._buf = bytearray()
        self._state = _IDLE
        self._remaining = 0
        self._keep_alive = True

    # -- asyncio callbacks ---------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.is_open = True

    def connection_lost(self, exc) -> None:
        self.is_open = False
        handler, self._handler = self._handler, None
        if handler is None:
            return
        if self._state == _UNTIL_CLOSE:
            self._state = _IDLE
            handler.complete(_now(), False)
        else:
            handler.fail("connection_closed" if exc is None else f"connection_error: {exc}", _now())

    def data_received(self, data: bytes) -> None:
        t = _now()
        if self._handler is None:  # bytes with no request outstanding: the server broke the protocol
            self.close()
            return
        self._buf += data
        try:
            self._parse(t)
        except (ValueError, IndexError) as err:
            handler, self._handler = self._handler, None
            self.close()
            if handler is not None:
                handler.fail(f"bad_response: {err}", t)

    # -- use ----------------------------------------------------------------------------------------------
    def send(self, data: bytes, handler: ResponseHandler) -> None:
        """Write one request; `handler` gets its response."""
        self._handler = handler
        self._state = _HEAD
        self._buf.clear()
        self.transport.write(data)

    def close(self) -> None:
        """Close now (an exchange in flight fails with `connection_closed`)."""
        if self.transport is not None and self.is_open:
            self.is_open = False
            self.transport.abort()

    # -- response parsing --------------------------------------------------------------------------------
    def _parse(self, t: int) -> None:
        buf = self._buf
        while buf:
            state = self._state
            if state == _CHUNK_DATA:
                n = min(len(buf), self._remaining)
                piece = bytes(buf[:n])
                del buf[:n]
                self._remaining -= n
                if self._remaining == 0:
                    self._state = _CHUNK_END
                self._handler.body(piece, t)
            elif state == _CHUNK_SIZE:
                i = buf.find(b"\r\n")
                if i < 0:
                    return
                size = int(bytes(buf[:i]).split(b";", 1)[0], 16)
                del buf[: i + 2]
                self._remaining = size
                self._state = _CHUNK_DATA if size else _TRAILERS
            elif state == _CHUNK_END:
                if len(buf) < 2:
                    return
                if buf[:2] != b"\r\n":
                    raise ValueError("chunk not followed by CRLF")
                del buf[:2]
                self._state = _CHUNK_SIZE
            elif state == _HEAD:
                i = buf.find(b"\r\n\r\n")
                if i < 0:
                    if len(buf) > 65536:
                        raise ValueError("response head over 64 KiB")
                    return
                head = bytes(buf[:i])
                del buf[: i + 4]
                self._start_body(head, t)
            elif state == _TRAILERS:
                i = buf.find(b"\r\n")
                if i < 0:
                    return
                del buf[: i + 2]
                if i == 0:
                    self._finish(t)
            elif state == _LENGTH:
                n = min(len(buf), self._remaining)
                piece = bytes(buf[:n])
                del buf[:n]
                self._remaining -= n
                self._handler.body(piece, t)
                if self._remaining == 0:
                    self._finish(t)
            elif state == _UNTIL_CLOSE:
                piece = bytes(buf)
                buf.clear()
                self._handler.body(piece, t)
            else:
                buf.clear()  # bytes after a complete response: ignore
                return

    def _start_body(self, head: bytes, t: int) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise ValueError(f"not an HTTP response: {lines[0][:60]!r}")
        status = int(parts[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        self._keep_alive = parts[0] == b"HTTP/1.1" and headers.get(b"connection", b"").lower() != b"close"
        self._handler.head(status, headers)
        if status == 100:  # Continue: the real head follows
            self._state = _HEAD
        elif b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            self._state = _CHUNK_SIZE
        elif b"content-length" in headers:
            self._remaining = int(headers[b"content-length"])
            self._state = _LENGTH
            if self._remaining == 0 or status in (204, 304):
                self._finish(t)
        elif status in (204, 304):
            self._finish(t)
        else:
            self._keep_alive = False
            self._state = _UNTIL_CLOSE

    def _finish(self, t: int) -> None:
        handler, self._handler = self._handler, None
        self._state = _IDLE
        if not self._keep_alive:
            self.close()
        handler.complete(t, self._keep_alive)
