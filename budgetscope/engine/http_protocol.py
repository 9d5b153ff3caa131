"""The HTTP protocol `engine serve` runs under uvicorn: uvicorn's own (httptools when installed, else h11), which also
notes when each request was read from its socket.

A request's span begins where its route handler starts (`arrival_ns`), which is after uvicorn has read the request
from the socket, parsed its head and started a task for it: with the event loop busy, one loop iteration or more.
`read_stamped` keeps the time the request's first bytes were handed to the protocol (`data_received`) in the ASGI
scope under `READ_NS`, and the handler puts it on the request's root span (`budgetscope.http.read_unix_nano`). What
comes before even that — the connection in the listen backlog, the bytes in the socket's receive queue while the
loop did other work — no server-side clock sees; only a client span does (the report's `network`).
"""

from __future__ import annotations

import time

READ_NS = "budgetscope.read_ns"
"""ASGI scope key: Unix-epoch ns at which the request's first bytes were read from its socket."""


def read_stamped(base: type) -> type:
    """A subclass of uvicorn's HTTP protocol class `base` that puts `READ_NS` into each new request's scope. It
    leans on two things uvicorn's h11 and httptools protocols share: bytes arrive through `data_received`, and the
    request being parsed is `self.scope`, a new dict per request. A request parsed outside `data_received` (the next
    of a pipelined pair) simply has no stamp."""

    class ReadStampedProtocol(base):
        def data_received(self, data: bytes) -> None:
            read_ns = time.time_ns()
            before = getattr(self, "scope", None)
            super().data_received(data)
            scope = getattr(self, "scope", None)
            if scope is not None and scope is not before:
                scope[READ_NS] = read_ns

    ReadStampedProtocol.__name__ = ReadStampedProtocol.__qualname__ = f"ReadStamped{base.__name__}"
    return ReadStampedProtocol


def uvicorn_config(app, **kw):
    """`uvicorn.Config` for `app` with the read-stamped auto HTTP protocol; `kw` as uvicorn.Config's."""
    # imported on use: uvicorn 467 ms to import
    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    return uvicorn.Config(app, http=read_stamped(AutoHTTPProtocol), **kw)
