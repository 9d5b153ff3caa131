"""A shorter GIL switch interval while latency-sensitive work shares the interpreter with a busy thread.

CPython lets a CPU-bound thread (span export building a batch, an HTTP handler) keep the GIL for the whole
switch interval, 5 ms by default, before a thread that wants it back (the engine between two torch ops, the
load generator's event loop about to send) may run. 0.5 ms keeps those bursts out of inter-token latency and
schedule lag; the price is more frequent hand-overs, negligible next to a decode step.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

SWITCH_INTERVAL_S = 0.0005


@contextlib.contextmanager
def short_switch_interval(interval_s: float = SWITCH_INTERVAL_S) -> Iterator[None]:
    """Lower the process's GIL switch interval to at most `interval_s` for the block, then restore it."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, interval_s))
    try:
        yield
    finally:
        sys.setswitchinterval(before)
