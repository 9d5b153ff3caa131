"""`Inflater`: undo an OTLP/HTTP body's Content-Encoding (gzip, deflate) in bounded steps, bounded in bytes and in
work; `InflatePool`: the output of every body being inflated, bounded together. gzip and deflate are what
OTLP/HTTP exporters send (the OpenTelemetry Collector gzips by default); any other encoding (zstd, br, snappy) is
refused with 415 before a byte of the body is read.

Bounds, each a refusal when passed:

- a body's output: at most `limit` bytes (the receiver's `max_message_bytes`): 413;
- gzip members: at most MAX_GZIP_MEMBERS (an exporter sends one; `cat a.gz b.gz` makes two): 400. Each member
  costs a zlib stream of its own, however empty: 314,572 empty members in 6 MiB cost ~35 CPU-s when every
  member's end copied the rest of the body (quadratic), and still ~0.6 s when linear;
- the work: linear in the input and the output. zlib is fed at most FEED_BYTES of input a call (what it leaves
  unread is copied, so never more than that), and a `step` makes at most STEP_BYTES of output and starts at most
  MAX_GZIP_MEMBERS members, so one step costs at most about a millisecond: the receiver runs each step as its own
  job on a small pool, and bodies inflating together take turns, step by step (a large one never holds up a
  small one for longer than a step);
- the output of all bodies being inflated together: at most the pool's limit (twice the message limit). When a
  step's output does not fit, the bodies holding more than the one asking (the largest first) give theirs back
  and are answered busy (429, retryable): a crowd of compression bombs, each on its way to 413, cannot keep a
  small gzip export from inflating, nor take the pending-bytes budget from plain exports. A body's output joins
  that budget once it is whole, as any other body's bytes.
"""

from __future__ import annotations

import threading
import zlib

ENCODINGS = ("gzip", "x-gzip", "deflate")
MAX_GZIP_MEMBERS = 64
FEED_BYTES = 64 << 10  # input handed to zlib in one call
STEP_BYTES = 256 << 10  # output of one step


class InflateError(Exception):
    """A body that cannot be inflated within its bounds: answer `status` with this one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Busy(Exception):
    """The body's output gave way to smaller ones (the pool was full): answer busy (429), retryable."""


def check_encoding(encoding: str) -> None:
    """415 for an encoding the receiver does not inflate."""
    if encoding not in ("", "identity", *ENCODINGS):
        raise InflateError(415, f"unsupported Content-Encoding {encoding[:64]!r} (use gzip, deflate or none)")


def _is_zlib(head: bytes) -> bool:
    """Whether `head` starts with a zlib header (RFC 1950: deflate method, a valid check value); deflate is
    meant to be zlib-wrapped, and some clients send raw deflate instead."""
    return len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and (head[0] << 8 | head[1]) % 31 == 0


class InflatePool:
    """The output bytes of the bodies being inflated, at most `limit` in all (thread-safe)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self.num_given_way = 0  # inflations that gave their bytes to smaller ones (answered busy)
        self._holders: dict[int, Inflater] = {}
        self._lock = threading.Lock()

    def grow(self, inflater: Inflater, nbytes: int) -> bool:
        """Count `nbytes` more of `inflater`'s output; when they do not fit, take them from the inflations
        holding more than `inflater` will, the largest first. False (and nothing counted) if `inflater` gave its
        own bytes way, or it is itself among the largest."""
        with self._lock:
            if inflater.has_given_way:
                return False
            if self.used + nbytes > self.limit:
                after = inflater.held + nbytes
                for other in sorted(self._holders.values(), key=lambda i: i.held, reverse=True):
                    if self.used + nbytes <= self.limit or other.held <= after:
                        break
                    if other is not inflater:
                        self._drop(other)
                        other.has_given_way = True
                        self.num_given_way += 1
            if self.used + nbytes > self.limit:
                return False
            self.used += nbytes
            inflater.held += nbytes
            self._holders[id(inflater)] = inflater
            return True

    def release(self, inflater: Inflater) -> None:
        """`inflater` is done (or failed): its bytes leave the pool."""
        with self._lock:
            self._drop(inflater)

    def _drop(self, inflater: Inflater) -> None:
        self.used -= inflater.held
        inflater.held = 0
        self._holders.pop(id(inflater), None)


class Inflater:
    """One body being inflated: call `step()` until it returns True, then take `output`. Its output is counted
    in `pool` as it is made (`release` it from the pool when done, whatever the outcome)."""

    __slots__ = (
        "body",
        "pos",
        "wbits",
        "is_gzip",
        "limit",
        "parts",
        "size",
        "output",
        "stream",
        "members",
        "pool",
        "held",
        "has_given_way",
    )

    def __init__(self, body: bytes, encoding: str, limit: int, pool: InflatePool):
        check_encoding(encoding)
        self.body = memoryview(body)
        self.pos = 0  # input consumed by finished members and the current stream
        self.is_gzip = encoding != "deflate"
        self.wbits = 16 + zlib.MAX_WBITS if self.is_gzip else zlib.MAX_WBITS if _is_zlib(body[:2]) else -zlib.MAX_WBITS
        self.limit = limit
        self.parts: list[bytes] = []  # the output so far, as zlib made it (joined once, at the end)
        self.size = 0  # their bytes
        self.output = b""  # the whole output, once `step` returned True
        self.stream = None  # the current member's decompressor
        self.members = 0
        self.pool = pool
        self.held = 0  # bytes counted in the pool
        self.has_given_way = False

    def step(self) -> bool:
        """Inflate up to STEP_BYTES more (and at most MAX_GZIP_MEMBERS members); True once the body is done
        (then `output` holds it). Raises InflateError, or Busy when its bytes gave way."""
        goal = self.size + STEP_BYTES
        try:
            while self.size < goal:
                if self.stream is None:
                    if self.pos >= len(self.body):
                        return self._done()
                    self.members += 1
                    if self.members > MAX_GZIP_MEMBERS:
                        raise InflateError(400, f"a gzip body of more than {MAX_GZIP_MEMBERS} members")
                    self.stream = zlib.decompressobj(self.wbits)
                moved = self._feed(goal)
                if self.stream.eof:
                    self.stream = None
                    if not self.is_gzip:  # one deflate stream; what follows it is ignored
                        return self._done()
                elif not moved:
                    raise InflateError(400, f"a truncated {'gzip' if self.is_gzip else 'deflate'} body")
        except zlib.error as e:
            raise InflateError(400, f"body is not valid {'gzip' if self.is_gzip else 'deflate'} ({e})") from None
        return False

    def _done(self) -> bool:
        """The output as one bytes object (joined here, off the event loop), the parts let go."""
        self.output, self.parts, self.body = b"".join(self.parts), [], memoryview(b"")
        return True

    def _feed(self, goal: int) -> bool:
        """One zlib call: at most FEED_BYTES in, at most up to `goal` (and one byte past `limit`) out; whether
        it consumed or made anything."""
        piece = self.body[self.pos : self.pos + FEED_BYTES]
        room = min(goal, self.limit + 1) - self.size  # >= 1: 0 would mean no limit to zlib
        made = self.stream.decompress(piece, room)
        # at the stream's end what follows it is `unused_data` (`unconsumed_tail` may still hold an earlier call's)
        left = self.stream.unused_data if self.stream.eof else self.stream.unconsumed_tail
        consumed = len(piece) - len(left)
        self.pos += consumed
        if self.size + len(made) > self.limit:
            raise InflateError(413, f"decompressed body exceeds {self.limit:,} bytes")
        if made and not self.pool.grow(self, len(made)):
            raise Busy
        if made:
            self.parts.append(made)
            self.size += len(made)
        return bool(made) or consumed > 0
