"""The instrumentation clock: `time.perf_counter_ns()` on the hot path, Unix-epoch ns in spans.

Why: the hot path needs a cheap clock that never jumps, so that the stage spans of one request tile its root
exactly, whatever NTP does meanwhile. `perf_counter_ns()` (CLOCK_MONOTONIC on Linux, a vDSO call) is that
clock. Spans need Unix-epoch ns, so each request pairs one `time.time_ns()` with one `perf_counter_ns()`
when it is received (its *anchor*) and every later mark is converted as `anchor_unix + (mark - anchor_mono)`
when spans are built, off the hot path. A wall-clock step between two requests moves the second request's
anchor but never stretches a duration inside one.
"""

from __future__ import annotations

import time

now_ns = time.perf_counter_ns
"""The hot-path clock: monotonic ns with an arbitrary origin."""

_UNIX_1990_NS = 631_152_000 * 1_000_000_000
"""Below this, an int ns timestamp cannot be Unix-epoch time of a live system: it is a perf_counter reading."""


def anchor() -> tuple[int, int]:
    """A pair (Unix-epoch ns, perf_counter ns) taken back to back, to convert later perf_counter readings."""
    return time.time_ns(), time.perf_counter_ns()


def to_unix_ns(mono_ns: int, anchor_pair: tuple[int, int]) -> int:
    """Convert a `perf_counter_ns()` reading into Unix-epoch ns with an anchor from `anchor()`."""
    return anchor_pair[0] + (mono_ns - anchor_pair[1])


def as_unix_span(start_ns: int, end_ns: int) -> tuple[int, int]:
    """Unix-epoch ns for an interval given either in Unix-epoch ns or in `perf_counter_ns()` readings.

    A value before 1990 is taken for a perf_counter reading and converted with one anchor taken now, the
    same for both ends so that the duration stays exact.
    """
    if start_ns >= _UNIX_1990_NS and end_ns >= _UNIX_1990_NS:
        return start_ns, end_ns
    pair = anchor()
    if start_ns < _UNIX_1990_NS:
        start_ns = to_unix_ns(start_ns, pair)
    if end_ns < _UNIX_1990_NS:
        end_ns = to_unix_ns(end_ns, pair)
    return start_ns, end_ns
