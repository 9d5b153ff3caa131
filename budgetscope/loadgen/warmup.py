"""`Warmup`: the first part of a run, sent and answered like the rest but left out of every figure.

    Warmup.parse("20")    # the first 20 requests
    Warmup.parse("10s")   # the requests due (open loop) or sent (closed loop) in the first 10 seconds

Caches, connection pools and the server's compiled kernels warm up in it, so the figures describe the steady
state. The warm-up counts within `--requests` / `--duration`; see docs/loadgen.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from budgetscope.loadgen.errors import LoadgenError


@dataclass(frozen=True, slots=True)
class Warmup:
    """`num_requests`: the first this many requests; `seconds`: those due or sent before this many seconds."""

    num_requests: int = 0
    seconds: float = 0.0

    @classmethod
    def parse(cls, text: str | None) -> Warmup:
        """`N` (requests) or `Ns` (seconds); None or empty: no warm-up."""
        text = (text or "").strip()
        if not text:
            return cls()
        try:
            if text.endswith("s"):
                seconds = float(text[:-1])
                if seconds >= 0 and seconds != float("inf"):
                    return cls(seconds=seconds)
            elif int(text) >= 0:
                return cls(num_requests=int(text))
        except ValueError:
            pass
        raise LoadgenError(f"--warmup {text!r}: give a number of requests (20) or of seconds (10s)")

    def __bool__(self) -> bool:
        return self.num_requests > 0 or self.seconds > 0

    def covers(self, index: int, since_start_ns: int) -> bool:
        """Whether the request `index`, due or sent `since_start_ns` after the run's start, is warm-up."""
        return index < self.num_requests or (self.seconds > 0 and since_start_ns < self.seconds * 1e9)

    def __str__(self) -> str:
        if self.num_requests:
            return f"the first {self.num_requests} requests"
        return f"the first {self.seconds:g} s" if self.seconds else "none"
