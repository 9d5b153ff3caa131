"""`Inflater`: undo an OTLP/HTTP body's Content-Encoding (gzip, deflate) in bounded steps, bounded in bytes and in
work. gzip and deflate are what OTLP/HTTP exporters send (the OpenTelemetry Collector gzips by default); any
other encoding (zstd, br, snappy) is refused with 415 before a byte of the body is inflated.

Bounds, each a refusal when passed:

- the output: at most `limit` bytes (the receiver's `max_message_bytes`): 413;
- gzip members: at most MAX_GZIP_MEMBERS (an exporter sends one; `cat a.gz b.gz` makes two): 400. Each member
  costs a zlib stream of its own, however empty: 314,572 empty members in 6 MiB cost ~35 CPU-s when every
  member's end copied the rest of the body (quadratic), and still ~0.6 s when linear;
- the work: linear in the input and the output. zlib is fed at most FEED_BYTES of input a call (what it leaves
  unread is copied, so never more than that), and a `step` produces at most STEP_BYTES of output and starts at
  most MAX_GZIP_MEMBERS members, so one step costs at most about a millisecond: the receiver runs each step as
  its own job on a small pool, and bodies inflating together take turns, step by step (a large one never
  holds up a small one for longer than a step).

Output is counted as it is made: `reserve(n)` is called for every n bytes the output grows past what was
already reserved for the body (its compressed bytes); a refusal ends the inflation as busy.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

ENCODINGS = ("gzip", "x-gzip", "deflate")
MAX_GZIP_MEMBERS = 64
FEED_BYTES = 64 << 10  # input handed to zlib in one call
STEP_BYTES = 1 << 20  # output of one step


class InflateError(Exception):
    """A body that cannot be inflated within its bounds: answer `status` with this one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Busy(Exception):
    """The pending-bytes budget refused the output's growth: answer busy (429), retryable."""

    def __init__(self, outcome):
        super().__init__("the pending bytes are at their limit")
        self.outcome = outcome


def check_encoding(encoding: str) -> None:
    """415 for an encoding the receiver does not inflate."""
    if encoding not in ("", "identity", *ENCODINGS):
        raise InflateError(415, f"unsupported Content-Encoding {encoding[:64]!r} (use gzip, deflate or none)")


def _is_zlib(head: bytes) -> bool:
    """Whether `head` starts with a zlib header (RFC 1950: deflate method, a valid check value); deflate is
    meant to be zlib-wrapped, and some clients send raw deflate instead."""
    return len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and (head[0] << 8 | head[1]) % 31 == 0


class Inflater:
    """One body being inflated: call `step()` until it returns True, then take `output()`. `reserved`: the budget
    bytes the body already holds (its compressed size); `reserve(n)` asks for n more (None: granted, else the
    refusal's outcome, raised as `Busy`). `reserved` is kept up to date, for the caller to release."""

    __slots__ = ("body", "pos", "wbits", "is_gzip", "limit", "out", "stream", "members", "reserved", "reserve")

    def __init__(self, body: bytes, encoding: str, limit: int, reserved: int, reserve: Callable[[int], object]):
        check_encoding(encoding)
        self.body = memoryview(body)
        self.pos = 0  # input consumed by finished members and the current stream
        self.is_gzip = encoding != "deflate"
        self.wbits = 16 + zlib.MAX_WBITS if self.is_gzip else zlib.MAX_WBITS if _is_zlib(body[:2]) else -zlib.MAX_WBITS
        self.limit = limit
        self.out = bytearray()
        self.stream = None  # the current member's decompressor
        self.members = 0
        self.reserved = reserved
        self.reserve = reserve

    def output(self) -> bytes:
        return bytes(self.out)

    def step(self) -> bool:
        """Inflate up to STEP_BYTES more (and at most MAX_GZIP_MEMBERS members); True once the body is done."""
        goal = len(self.out) + STEP_BYTES
        try:
            while len(self.out) < goal:
                if self.stream is None:
                    if self.pos >= len(self.body):
                        return True
                    self.members += 1
                    if self.members > MAX_GZIP_MEMBERS:
                        raise InflateError(400, f"a gzip body of more than {MAX_GZIP_MEMBERS} members")
                    self.stream = zlib.decompressobj(self.wbits)
                moved = self._feed(goal)
                if self.stream.eof:
                    self.stream = None
                    if not self.is_gzip:  # one deflate stream; what follows it is ignored
                        return True
                elif not moved:
                    raise InflateError(400, f"a truncated {'gzip' if self.is_gzip else 'deflate'} body")
        except zlib.error as e:
            raise InflateError(400, f"body is not valid {'gzip' if self.is_gzip else 'deflate'} ({e})") from None
        return False

    def _feed(self, goal: int) -> bool:
        """One zlib call: at most FEED_BYTES in, at most up to `goal` (and one byte past `limit`) out; whether
        it consumed or made anything."""
        piece = self.body[self.pos : self.pos + FEED_BYTES]
        room = min(goal, self.limit + 1) - len(self.out)  # >= 1: 0 would mean no limit to zlib
        made = self.stream.decompress(piece, room)
        consumed = len(piece) - len(self.stream.unconsumed_tail) - len(self.stream.unused_data)
        self.pos += consumed
        self.out += made
        if len(self.out) > self.limit:
            raise InflateError(413, f"decompressed body exceeds {self.limit:,} bytes")
        if (grow := len(self.out) - self.reserved) > 0:
            if (refused := self.reserve(grow)) is not None:
                raise Busy(refused)
            self.reserved += grow
        return bool(made) or consumed > 0
