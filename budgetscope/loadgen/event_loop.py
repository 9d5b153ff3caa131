"""`new_event_loop()`: an asyncio loop whose timers fire with sub-millisecond precision.

Why: asyncio sleeps in `epoll_wait`, whose timeout is whole milliseconds (CPython rounds up), so a timer
fires up to 1 ms late - as large as the schedule lag we mean to measure. `PreciseEpollSelector` first
waits on the epoll descriptor itself with `select()`, whose timeout has microsecond resolution, then
collects the ready events from epoll without blocking. I/O still goes through epoll, so the number of
connections is not limited by `select()`'s FD_SETSIZE.
"""

from __future__ import annotations

import asyncio
import select
import selectors

_FD_SETSIZE = 1024


class PreciseEpollSelector(selectors.EpollSelector):
    """An epoll selector whose finite timeouts are kept to the microsecond."""

    def select(self, timeout: float | None = None):
        if timeout is not None and timeout > 0 and self._selector.fileno() < _FD_SETSIZE:
            select.select([self._selector.fileno()], [], [], timeout)
            timeout = 0
        return super().select(timeout)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A selector event loop with precise timers where epoll exists, the default loop elsewhere."""
    if hasattr(select, "epoll"):
        return asyncio.SelectorEventLoop(PreciseEpollSelector())
    return asyncio.new_event_loop()
