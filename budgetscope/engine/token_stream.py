"""How a request's progress reaches its response coroutine: the engine's thread (in process) or the engine process's
reader thread says "this sequence has N tokens now (and is finished)", and the event loop wakes the request.

One wake-up of the event loop carries every sequence that moved since the last one (`TokenRelay`): a step of 64
sequences costs the loop one cross-thread call, not 64 (each `call_soon_threadsafe` writes to the loop's self-pipe
and hands the GIL over). A request's coroutine takes all the tokens that arrived since it last ran (`TokenEvents`):
when the loop falls behind the engine, the next wake-up finds several tokens and the response writes them at once,
instead of a queue of wake-ups growing without bound in front of everything else on the loop.
"""

from __future__ import annotations

import asyncio
from collections import deque


class TokenRelay:
    """Carries (TokenEvents, token count, finished) from any thread to one event loop, in order, with one
    `call_soon_threadsafe` for whatever was pushed before the loop got to it. Lock-free: `deque.append` and
    `popleft` are atomic, and the order below (push appends, then looks at the flag; the drain clears the flag,
    then empties the deque) never strands an item without a drain to come."""

    __slots__ = ("loop", "_pending", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self._pending: deque[tuple[TokenEvents, int, bool]] = deque()
        self._scheduled = False

    def push(self, events: TokenEvents, count: int, done: bool) -> None:
        """Any thread: `events`' sequence has `count` tokens (prompt included) and is finished when `done`."""
        self._pending.append((events, count, done))
        if self._scheduled:
            return
        self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop has closed (the server stopped): nobody waits for these any more
            pass

    def _drain(self) -> None:
        self._scheduled = False
        pending = self._pending
        while pending:
            events, count, done = pending.popleft()
            events.update(count, done)


class TokenEvents:
    """One request's progress as its coroutine sees it: the latest token count and whether the sequence finished.
    `on_output` is the Sequence's callback (engine thread or core reader); `wait_past` is awaited on the loop."""

    __slots__ = ("relay", "count", "done", "_waiter")

    def __init__(self, relay: TokenRelay):
        self.relay = relay
        self.count = 0
        self.done = False
        self._waiter: asyncio.Future | None = None

    def on_output(self, seq) -> None:  # engine thread, or the engine process's reader thread
        self.relay.push(self, seq.num_tokens, seq.is_finished)

    def update(self, count: int, done: bool) -> None:
        """On the loop: the relay's news, in the order it was pushed."""
        self.count = max(self.count, count)
        self.done = self.done or done
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait_past(self, sent: int) -> tuple[int, bool]:
        """(token count, finished) once the sequence has more than `sent` tokens or has finished."""
        while self.count <= sent and not self.done:
            self._waiter = self.relay.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self.count, self.done
