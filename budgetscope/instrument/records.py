"""What the hot path hands to the span builder: plain data, no OpenTelemetry objects.

The hot path records `(stage, perf_counter ns, tokens so far)` marks and token times; `finish()` and
`Instrumentation.step()` wrap them in these records, and the export worker turns them into spans later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from budgetscope.instrument.traceparent import TraceParent


@dataclass(slots=True)
class FinishedRequest:
    """One finished request. Times are `perf_counter_ns()` readings, converted with `anchor` when built."""

    trace_id: int
    span_id: int
    parent: TraceParent | None
    anchor: tuple[int, int]
    """(Unix-epoch ns, perf_counter ns) taken together at server receive."""
    marks: list[tuple[str, int, int]]
    """(stage, perf_counter ns it began, output tokens emitted before it began), in order; first is frontend."""
    token_ns: list[int]
    """perf_counter ns of each output token."""
    end_ns: int
    model: str | None
    tier: str
    tenant: str | None
    operation: str
    request_id: str | None
    outcome: str
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    error_type: str | None
    extra: dict[str, Any] | None


@dataclass(slots=True)
class EngineStep:
    """One engine step. Times are Unix-epoch ns."""

    start_ns: int
    end_ns: int
    batch_size: int
    prefill_tokens: int
    decode_seqs: int
    kv_blocks_used: int
    kv_blocks_total: int
    queue_depth: int
    preempted: int
    max_seqs: int | None = None  # the engine's limits, so that a report can tell which one a queue waited on
    token_budget: int | None = None
