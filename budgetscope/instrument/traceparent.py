"""W3C Trace Context `traceparent` headers and random trace/span ids.

Format: `00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>`
(https://www.w3.org/TR/trace-context/#traceparent-header).
"""

from __future__ import annotations

import random
import re
from typing import NamedTuple

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
SAMPLED = 0x01


class TraceParent(NamedTuple):
    """A parsed traceparent: ids as ints, flags as an int."""

    trace_id: int
    span_id: int
    flags: int


def parse_traceparent(header: str | None) -> TraceParent | None:
    """Parse a `traceparent` header; None when absent or invalid (the W3C rule: then start a new trace)."""
    if not header:
        return None
    match = _TRACEPARENT.match(header.strip().lower())
    if match is None:
        return None
    version, trace_hex, span_hex, flags_hex, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if trace_id == 0 or span_id == 0:
        return None
    return TraceParent(trace_id, span_id, int(flags_hex, 16))


def format_traceparent(trace_id: int, span_id: int, flags: int = SAMPLED) -> str:
    """The `traceparent` header value for a span."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def new_trace_id() -> int:
    """A random, non-zero 128-bit trace id (as the OpenTelemetry SDK's RandomIdGenerator makes them)."""
    trace_id = random.getrandbits(128)
    while trace_id == 0:
        trace_id = random.getrandbits(128)
    return trace_id


def new_span_id() -> int:
    """A random, non-zero 64-bit span id."""
    span_id = random.getrandbits(64)
    while span_id == 0:
        span_id = random.getrandbits(64)
    return span_id
