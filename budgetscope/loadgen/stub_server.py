"""`StubServer`: a minimal OpenAI-compatible streaming endpoint on 127.0.0.1, for measuring the load
generator's own overhead and for tests. It generates nothing: each response streams canned tokens.

    python -m budgetscope.loadgen.stub_server --port 8001 --tokens 8

Serves `POST /v1/completions`, `POST /v1/chat/completions` (SSE when `stream` is true, JSON otherwise)
and `GET /v1/models`, over HTTP/1.1 keep-alive with chunked bodies. Knobs: tokens per response (capped by
`max_tokens`), delays before the first and between tokens, a forced HTTP status, an error event or a
dropped connection after N tokens, a concurrency limit that queues requests (a slow server).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import threading

import orjson

MODEL = "stub"


class StubServer:
    """A canned SSE server. Every knob may be changed between requests (tests do)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tokens: int = 4,
        first_token_delay_s: float = 0.0,
        token_delay_s: float = 0.0,
        status: int = 200,
        error_after: int | None = None,
        drop_after: int | None = None,
        max_concurrency: int | None = None,
        record: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self.tokens = tokens
        self.first_token_delay_s = first_token_delay_s
        self.token_delay_s = token_delay_s
        self.status = status
        self.error_after = error_after
        self.drop_after = drop_after
        self.max_concurrency = max_concurrency
        self.record = record
        self.received: list[tuple[str, dict[str, str], dict]] = []
        """(path, headers with lower-case names, body) of each request, when `record` is set."""
        self.num_requests = 0
        self.active = 0
        self._queue: collections.deque = collections.deque()
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:43121."""
        return f"http://{self.host}:{self.port}"

    async def start(self) -> StubServer:
        """Listen (port 0 picks a free port, then `port` holds it)."""
        self._loop = asyncio.get_running_loop()
        self._server = await self._loop.create_server(lambda: _StubProtocol(self), self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Stop listening and close the server."""
        if self._server is not None:
            self._server.close()

    async def __aenter__(self) -> StubServer:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def start_in_thread(self) -> StubServer:
        """Run the server on its own event loop in a daemon thread; returns once it listens."""
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.start())
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="stub-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop_thread(self) -> None:
        """Stop a server started with `start_in_thread`."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)


class _StubProtocol(asyncio.Protocol):
    def __init__(self, server: StubServer) -> None:
        self.server = server
        self.buf = b""
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = self.buf[:i].decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", 0))
            if len(self.buf) < i + 4 + length:
                return
            body = self.buf[i + 4 : i + 4 + length]
            self.buf = self.buf[i + 4 + length :]
            method, path = head[0].split(" ")[:2]
            self._handle(method, path, headers, body)

    def _handle(self, method: str, path: str, headers: dict, raw: bytes) -> None:
        srv = self.server
        if method == "GET" and path == "/v1/models":
            return self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        if method != "POST" or path not in ("/v1/completions", "/v1/chat/completions"):
            return self._json(404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}})
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return self._json(400, {"error": {"message": "body is not JSON", "type": "invalid_request"}})
        srv.num_requests += 1
        if srv.record:
            srv.received.append((path, headers, body))
        if srv.status != 200:
            return self._json(srv.status, {"error": {"message": f"stub status {srv.status}", "type": "stub"}})
        job = (path.endswith("chat/completions"), body)
        if srv.max_concurrency is not None and srv.active >= srv.max_concurrency:
            srv._queue.append((self, job))
            return
        self._start(job)

    def _start(self, job) -> None:
        srv = self.server
        srv.active += 1
        is_chat, body = job
        n = min(srv.tokens, int(body.get("max_tokens") or srv.tokens))
        if not body.get("stream"):
            self._json(
                200,
                {
                    "object": "text_completion",
                    "model": MODEL,
                    "choices": [{"index": 0, "text": "x" * n}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1},
                },
            )
            return self._done()
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if srv.first_token_delay_s or srv.token_delay_s:
            asyncio.get_running_loop().call_later(srv.first_token_delay_s, self._emit, is_chat, n, 0, usage)
        else:
            self._emit(is_chat, n, 0, usage, all_at_once=True)

    def _emit(self, is_chat: bool, n: int, k: int, usage: bool, all_at_once: bool = False) -> None:
        srv = self.server
        if self.transport.is_closing():
            return self._done()
        out = []
        while k < n:
            if srv.drop_after is not None and k >= srv.drop_after:
                self.transport.write(b"".join(out))
                self.transport.abort()
                return self._done()
            if srv.error_after is not None and k >= srv.error_after:
                out.append(_chunk(b'data: {"error":{"message":"stub failure","type":"stub"}}\n\n'))
                break
            text = f"t{k} "
            event = (
                {"choices": [{"index": 0, "delta": {"content": text}}]}
                if is_chat
                else {"choices": [{"index": 0, "text": text}]}
            )
            out.append(_chunk(b"data: " + orjson.dumps(event) + b"\n\n"))
            k += 1
            if not all_at_once and k < n:
                self.transport.write(b"".join(out))
                asyncio.get_running_loop().call_later(srv.token_delay_s, self._emit, is_chat, n, k, usage)
                return
        if usage:
            out.append(_chunk(b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":%d}}\n\n' % n))
        out.append(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        self.transport.write(b"".join(out))
        self._done()

    def _done(self) -> None:
        srv = self.server
        srv.active -= 1
        if srv._queue:
            proto, job = srv._queue.popleft()
            proto._start(job)

    def _json(self, status: int, obj: dict) -> None:
        body = orjson.dumps(obj)
        self.transport.write(
            b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (status, len(body), body)
        )


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def main() -> None:
    """Run a stub server until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--token-delay-ms", type=float, default=0.0)
    parser.add_argument("--first-token-delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    server = StubServer(
        args.host,
        args.port,
        tokens=args.tokens,
        token_delay_s=args.token_delay_ms / 1000,
        first_token_delay_s=args.first_token_delay_ms / 1000,
    )

    async def serve() -> None:
        await server.start()
        print(f"stub server on {server.url}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
