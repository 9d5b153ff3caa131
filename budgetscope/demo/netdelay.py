"""A real delaying TCP hop: a loopback proxy that holds every chunk for a while before passing it on.

A `slow_fraction` of the accepted connections, spread evenly (with 0.25, the 4th, 8th, 12th…), are slow: every
chunk, both ways, waits `delay_ms`. The others pass at once. Order within a direction is kept. This is how the `slow-network`
scenario puts network time in the tail for real, between the load generator and the engine.
"""

from __future__ import annotations

import asyncio
import threading
import time


class DelayProxy:
    """`DelayProxy(target_port).start()` → listens on 127.0.0.1:`port`, forwards to 127.0.0.1:`target_port`."""

    def __init__(
        self,
        target_port: int,
        delay_ms: float,
        slow_fraction: float = 1.0,
        port: int = 0,
        target_host: str = "127.0.0.1",
    ):
        if delay_ms < 0 or not 0 <= slow_fraction <= 1:
            raise ValueError("delay_ms must be ≥ 0 and slow_fraction in [0, 1]")
        self.target = (target_host, target_port)
        self.delay_s = delay_ms / 1000
        self.slow_fraction = slow_fraction
        self.port = port
        self.connections = 0
        self.slow_connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="budgetscope-delay-proxy", daemon=True)

    def start(self) -> DelayProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> DelayProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            tasks = asyncio.all_tasks(self._loop)
            for t in tasks:
                t.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        i = self.connections
        self.connections += 1
        slow = int((i + 1) * self.slow_fraction) > int(i * self.slow_fraction)
        self.slow_connections += slow
        delay = self.delay_s if slow else 0.0
        try:
            up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pump(reader, up_w, delay), _pump(up_r, writer, delay), return_exceptions=True)


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay_s: float) -> None:
    """Copy src → dst, each chunk released `delay_s` after it arrived (a fixed-latency link)."""
    q: asyncio.Queue = asyncio.Queue()

    async def release() -> None:
        while True:
            due, data = await q.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                break
            dst.write(data)
            await dst.drain()
        dst.close()

    sender = asyncio.create_task(release())
    try:
        while data := await src.read(65536):
            q.put_nowait((time.monotonic() + delay_s, data))
    except (ConnectionError, OSError):
        pass
    q.put_nowait((time.monotonic() + delay_s, None))
    await sender
