"""`OtlpHttpReceiver`: OTLP/HTTP `POST /v1/traces` and `POST /v1/metrics` (GPU samples; protobuf or JSON,
gzip/deflate) on the standard library.

Statuses follow the OTLP/HTTP spec: 200 with an `ExportTraceServiceResponse` in the request's encoding once the
batch is in the archive; 400 (bad body), 413 (too large), 415 (media type / encoding), 404/405 — none of them
retried by clients; 429 (pending bytes at their limit) and 503 (shutting down, archive failure) with
`Retry-After`, which clients retry. Every error body is a `google.rpc.Status` in the request's encoding.
"""

from __future__ import annotations

import http.server
import logging
import socket
import threading
import zlib
from urllib.parse import urlsplit

from budgetscope.collector import status as st
from budgetscope.collector.pending import Outcome, PendingQueue

log = logging.getLogger("budgetscope.collector")

TRACES_PATH = "/v1/traces"
METRICS_PATH = "/v1/metrics"
FORMATS = {"application/x-protobuf": "otlp-proto", "application/json": "otlp-json"}
METRICS_FORMATS = {"otlp-proto": "otlp-metrics-proto", "otlp-json": "otlp-metrics-json"}
SUCCESS_BODY = {"otlp-proto": b"", "otlp-json": b"{}"}  # an empty Export{Trace,Metrics}ServiceResponse
CONTENT_TYPE = {"otlp-proto": "application/x-protobuf", "otlp-json": "application/json"}
ERROR_STATUS = {Outcome.REJECTED: 400, Outcome.BUSY: 429, Outcome.CLOSED: 503, Outcome.FAILED: 503}
RETRYABLE = (429, 503)  # the statuses that carry Retry-After
RPC_CODE = {429: st.RESOURCE_EXHAUSTED, 503: st.UNAVAILABLE}  # the Status.code in the body; others: INVALID_ARGUMENT
IDLE_TIMEOUT_S = 60.0  # a connection silent this long (between or within requests) is closed


class _BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """Undo Content-Encoding (gzip, possibly multi-member; deflate as zlib or raw), never past `limit` bytes."""
    if encoding in ("", "identity"):
        return body
    if encoding in ("gzip", "x-gzip"):
        wbits = [16 + zlib.MAX_WBITS]
    elif encoding == "deflate":
        wbits = [zlib.MAX_WBITS, -zlib.MAX_WBITS]  # RFC says zlib; some clients send raw deflate
    else:
        raise _BadRequest(415, f"unsupported Content-Encoding {encoding!r} (use gzip, deflate or none)")
    for i, wb in enumerate(wbits):
        out, data = bytearray(), body
        try:
            while data:
                d = zlib.decompressobj(wb)
                out += d.decompress(data, limit + 1 - len(out))
                if len(out) > limit or d.unconsumed_tail:
                    raise _BadRequest(413, f"decompressed body exceeds {limit:,} bytes")
                if not d.eof:
                    raise _BadRequest(400, f"truncated {encoding} body")
                data = d.unused_data if wb > 16 else b""
            return bytes(out)
        except zlib.error as e:
            if i + 1 == len(wbits):
                raise _BadRequest(400, f"body is not valid {encoding} ({e})") from None
    raise AssertionError("unreachable")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: exporters reuse their connection
    server_version = "budgetscope-collector"
    timeout = IDLE_TIMEOUT_S
    # TCP_NODELAY: an answer must leave at once. With Nagle's algorithm a small write behind one not yet
    # acknowledged waits for the peer's delayed ACK (40 ms on Linux), and every exporter waits for its answer.
    disable_nagle_algorithm = True
    receiver: "OtlpHttpReceiver"  # set on the subclass made per receiver

    def setup(self) -> None:
        super().setup()
        self.receiver.track(self.connection, True)

    def finish(self) -> None:
        self.receiver.track(self.connection, False)
        super().finish()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        log.debug("http %s: " + format, self.address_string(), *args)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._error(405 if urlsplit(self.path).path in self.receiver.paths else 404, "otlp-proto",
                    f"only POST {TRACES_PATH} is served here", close=True)

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

    def do_POST(self) -> None:  # noqa: N802
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        fmt = FORMATS.get(ctype)
        path = urlsplit(self.path).path
        if path not in self.receiver.paths:
            return self._error(404, fmt or "otlp-proto", f"no such endpoint; OTLP traces go to POST {TRACES_PATH}",
                               close=True)
        if fmt is None:
            return self._error(415, "otlp-proto", f"unsupported Content-Type {ctype or 'none'!r} "
                               "(use application/x-protobuf or application/json)", close=True)
        self.receiver.busy_begin()
        try:
            self._export(fmt, METRICS_FORMATS[fmt] if path == METRICS_PATH else fmt)
        finally:
            self.receiver.busy_end()

    def _export(self, fmt: str, batch_format: str) -> None:
        """`fmt`: the body's encoding (for the answer); `batch_format`: what the archive is told it holds."""
        r = self.receiver
        chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        length = self.headers.get("Content-Length")
        if not chunked and (length is None or not length.strip().isdigit()):
            return self._error(411, fmt, "a Content-Length (or chunked body) is required", close=True)
        declared = 0 if chunked else int(length)
        if declared > r.max_message_bytes:
            return self._error(413, fmt, f"body of {declared:,} bytes exceeds {r.max_message_bytes:,}", close=True)
        reserved = max(declared, 1)
        refused = r.queue.reserve(reserved)
        if refused:  # answered before reading the body, so the connection cannot be reused
            return self._outcome(refused, fmt, "", close=True)
        try:
            try:
                body = self._read_chunked(r.max_message_bytes) if chunked else self.rfile.read(declared)
                if not chunked and len(body) < declared:
                    raise _BadRequest(400, "body shorter than its Content-Length")
                encoding = (self.headers.get("Content-Encoding") or "").strip().lower()
                payload = _decompress(body, encoding, r.max_message_bytes)
            except _BadRequest as e:
                return self._error(e.status, fmt, str(e), close=True)
            except (OSError, ValueError) as e:
                return self._error(400, fmt, f"cannot read the body ({e})", close=True)
            if len(payload) > reserved:  # grow the reservation to what will sit in memory
                if refused := r.queue.reserve(len(payload) - reserved):
                    return self._outcome(refused, fmt, "")
                reserved = len(payload)
            ticket = r.queue.submit(payload, batch_format, "otlp-http", self.address_string() + f":{self.client_address[1]}",
                                    reserved)
            reserved = 0  # released by the writer (or by submit, when closed)
            self._outcome(ticket.outcome, fmt, ticket.error)
        finally:
            if reserved:
                r.queue.release(reserved)

    def _read_chunked(self, limit: int) -> bytes:
        out = bytearray()
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                raise _BadRequest(400, "malformed chunked body") from None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(out)
            if len(out) + size > limit:
                raise _BadRequest(413, f"body exceeds {limit:,} bytes")
            out += self.rfile.read(size)
            self.rfile.readline(1024)

    def _outcome(self, outcome: Outcome, fmt: str, error: str, close: bool = False) -> None:
        if outcome is Outcome.LANDED:
            return self._send(200, fmt, SUCCESS_BODY[fmt])
        message = error or {Outcome.BUSY: "the collector is busy (pending bytes at their limit); retry later",
                            Outcome.CLOSED: "the collector is shutting down; retry later"}.get(outcome, "")
        self._error(ERROR_STATUS[outcome], fmt, message, close=close or outcome is Outcome.CLOSED)

    def _error(self, status: int, fmt: str, message: str, close: bool = False) -> None:
        encode = st.status_json if fmt == "otlp-json" else st.status_proto
        retry_after_s = self.receiver.retry_after_s if status in RETRYABLE else None
        self._send(status, fmt, encode(RPC_CODE.get(status, st.INVALID_ARGUMENT), message), retry_after_s, close)

    def _send(self, status: int, fmt: str, body: bytes, retry_after_s: float | None = None,
              close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE[fmt])
        self.send_header("Content-Length", str(len(body)))
        if retry_after_s is not None:
            self.send_header("Retry-After", str(max(1, round(retry_after_s))))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        if self.request_version == "HTTP/0.9":
            self.end_headers()
            self.wfile.write(body)
            return
        self._headers_buffer += (b"\r\n", body)  # end_headers(), and the body in the same write
        self.flush_headers()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # idle keep-alive connections must not hold up shutdown; see close()
    # SO_REUSEADDR: a restart after a crash binds past the old socket's TIME_WAIT at once. On Linux it does not
    # let two listeners share a port (that is SO_REUSEPORT, left off): a port really in use still fails.
    allow_reuse_address = True

    def handle_error(self, request, client_address) -> None:
        log.debug("http connection from %s ended with an error", client_address, exc_info=True)


class OtlpHttpReceiver:
    """Serves OTLP/HTTP on (host, port) on its own thread; port 0 picks a free port (see `.port`)."""

    def __init__(self, host: str, port: int, queue: PendingQueue, max_message_bytes: int, retry_after_s: float,
                 metrics: bool = False):
        self.queue = queue
        self.paths = (TRACES_PATH, METRICS_PATH) if metrics else (TRACES_PATH,)  # metrics: GPU samples, opt-in
        self.max_message_bytes = max_message_bytes
        self.retry_after_s = retry_after_s
        self._connections: set[socket.socket] = set()
        self._num_busy = 0
        self._cond = threading.Condition()
        handler = type("Handler", (_Handler,), {"receiver": self})
        server = type("Server", (_Server,), {"address_family": socket.AF_INET6 if ":" in host else socket.AF_INET})
        self._server = server((host, port), handler)  # OSError if the port is taken
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="budgetscope-otlp-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop_accepting(self, grace_s: float) -> None:
        """Close the listening socket; connections already open are still answered (503 once the queue is
        closed). `grace_s` is unused: `close` bounds the wait."""
        if self._thread.is_alive():  # shutdown() waits for serve_forever, which never ran otherwise
            self._server.shutdown()
        self._server.server_close()

    def close(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for requests in progress to be answered, then drop the idle connections."""
        with self._cond:
            self._cond.wait_for(lambda: self._num_busy == 0, timeout_s)
            conns = list(self._connections)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- bookkeeping called by handler threads -------------------------------------------------------------
    def track(self, conn: socket.socket, is_open: bool) -> None:
        with self._cond:
            (self._connections.add if is_open else self._connections.discard)(conn)

    def busy_begin(self) -> None:
        with self._cond:
            self._num_busy += 1

    def busy_end(self) -> None:
        with self._cond:
            self._num_busy -= 1
            self._cond.notify_all()
