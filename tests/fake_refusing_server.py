"""A fake OpenAI endpoint for tests only, on 127.0.0.1: lists model `m`, answers the first `refusals` completions
(all of them when None) with 429 and `Retry-After: retry_after`, the rest with a JSON completion."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REFUSED = b'{"error": {"message": "no capacity", "type": "rate_limit_exceeded"}}'
SERVED = b'{"choices": [{"text": "x"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}'


class FakeRefusingServer(BaseHTTPRequestHandler):
    refusals: int | None = None
    retry_after = "1"
    seen = 0
    lock = threading.Lock()

    def do_GET(self):  # noqa: N802 - the name http.server calls
        self._reply(200, b'{"object": "list", "data": [{"id": "m"}]}')

    def do_POST(self):  # noqa: N802 - the name http.server calls
        self.rfile.read(int(self.headers.get("content-length", 0)))
        cls = type(self)
        with cls.lock:
            cls.seen += 1
            refuse = cls.refusals is None or cls.seen <= cls.refusals
        self._reply(429, REFUSED, {"retry-after": cls.retry_after}) if refuse else self._reply(200, SERVED)

    def _reply(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextmanager
def refusing(refusals: int | None = None, retry_after: str = "1"):
    """Serve the fake in a thread; yields its base URL."""
    handler = type("Fake", (FakeRefusingServer,), {"refusals": refusals, "retry_after": retry_after, "seen": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
