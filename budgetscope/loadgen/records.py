"""`RequestRecord`: what the load generator saw of one request, and the client figures derived from it.

Times are `perf_counter_ns()` readings taken in the client's event loop; `to_dict` converts them to
Unix-epoch ns with the run's anchor. Each figure names its anchor:
- `sent`: when the request's bytes were handed to the socket (docs/design.md: `client_ttft_ms`, `client_e2e_ms`);
- `scheduled`: when the open-loop plan meant to send it (includes schedule lag: coordinated omission shown).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestRecord:
    """One request: the plan's intent, what happened on the wire, and the outcome."""

    index: int
    scheduled_ns: int
    prompt_tokens: int
    max_tokens: int
    tier: str | None = None
    tenant: str | None = None
    prefix_id: int = -1
    trace_id: int = 0
    span_id: int = 0
    sent_ns: int | None = None
    first_token_ns: int | None = None
    end_ns: int | None = None
    token_ns: list[int] = field(default_factory=list)
    """Arrival time of each token event (an SSE event carrying output text)."""
    status: int | None = None
    """HTTP status; None when no response head arrived."""
    output_tokens: int | None = None
    """From the stream's `usage` when given, else the number of token events."""
    input_tokens: int | None = None
    """From the stream's `usage` (`prompt_tokens`), when given."""
    is_done: bool = False
    """The stream ended with `data: [DONE]`."""
    error: str | None = None
    """None, or `kind: detail` (kinds: connect_error, connection_closed, connection_error, timeout, http_<status>,
    stream_error, bad_event, bad_response, incomplete_stream)."""
    retry_after_s: float | None = None
    """The response's `Retry-After`, seconds (429/503), when it had one in seconds."""
    is_warmup: bool = False
    """Sent in the warm-up phase: answered like any other, left out of every figure."""
    server_attributes: dict | None = None
    """What the server reported in its response (headers, llama.cpp `timings`), as span attributes; see
    server_report.py."""

    @property
    def is_ok(self) -> bool:
        """HTTP 200 and no error."""
        return self.status == 200 and self.error is None

    @property
    def outcome(self) -> str:
        """`ok`, or the error kind (`http_503`, `timeout`, `connect_error`, ...)."""
        if self.is_ok:
            return "ok"
        if self.error is not None:
            return self.error.split(":", 1)[0]
        return f"http_{self.status}"

    # -- figures (ms) ---------------------------------------------------------------------------------
    @property
    def schedule_lag_ms(self) -> float:
        """sent - scheduled (NaN when never sent)."""
        return _ms(self.sent_ns, self.scheduled_ns)

    @property
    def ttft_ms(self) -> float:
        """`client_ttft_ms`: first token - sent."""
        return _ms(self.first_token_ns, self.sent_ns)

    @property
    def ttft_scheduled_ms(self) -> float:
        """first token - scheduled (client TTFT as the open-loop user saw it)."""
        return _ms(self.first_token_ns, self.scheduled_ns)

    @property
    def e2e_ms(self) -> float:
        """`client_e2e_ms`: end of response - sent."""
        return _ms(self.end_ns, self.sent_ns)

    @property
    def e2e_scheduled_ms(self) -> float:
        """end of response - scheduled."""
        return _ms(self.end_ns, self.scheduled_ns)

    @property
    def tpot_ms(self) -> float:
        """`client_tpot_ms`, vLLM's definition: (E2E - TTFT) / (output tokens - 1); NaN for fewer than two tokens
        or no first token. Output tokens are the server's count (usage) when it sent one, else the token events."""
        n = self.output_tokens or len(self.token_ns)
        if n < 2 or self.first_token_ns is None or self.end_ns is None:
            return math.nan
        return (self.e2e_ms - self.ttft_ms) / (n - 1)

    @property
    def itl_ms(self) -> list[float]:
        """Gaps between consecutive token events, ms. No anchor."""
        t = self.token_ns
        return [(t[i] - t[i - 1]) / 1e6 for i in range(1, len(t))]

    def to_dict(self, unix0: int) -> dict:
        """A JSON-ready dict: times as Unix-epoch ns (`unix0` + reading), figures in ms (None for NaN)."""

        def unix(t):
            return None if t is None else unix0 + t

        return {
            "index": self.index,
            "trace_id": f"{self.trace_id:032x}",
            "span_id": f"{self.span_id:016x}",
            "tier": self.tier,
            "tenant": self.tenant,
            "prefix_id": None if self.prefix_id < 0 else self.prefix_id,
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "scheduled_unix_nano": unix(self.scheduled_ns),
            "sent_unix_nano": unix(self.sent_ns),
            "first_token_unix_nano": unix(self.first_token_ns),
            "end_unix_nano": unix(self.end_ns),
            "warmup": self.is_warmup,
            "status": self.status,
            "outcome": self.outcome,
            "error": self.error,
            "done": self.is_done,
            "output_tokens": self.output_tokens,
            "input_tokens": self.input_tokens,
            "schedule_lag_ms": _none(self.schedule_lag_ms),
            "client_ttft_ms": _none(self.ttft_ms),
            "client_ttft_scheduled_ms": _none(self.ttft_scheduled_ms),
            "client_e2e_ms": _none(self.e2e_ms),
            "client_e2e_scheduled_ms": _none(self.e2e_scheduled_ms),
            "client_tpot_ms": _none(self.tpot_ms),
            "itl_ms": [round(x, 4) for x in self.itl_ms],
        }


def _ms(later: int | None, earlier: int | None) -> float:
    if later is None or earlier is None:
        return math.nan
    return (later - earlier) / 1e6


def _none(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 4)
