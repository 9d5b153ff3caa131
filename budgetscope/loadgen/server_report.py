"""What a server reports about a request in its response, kept on the client span under the server's own names.

Some servers export no spans but tell each client how long parts of its request took:
- TGI: `x-total-time`, `x-validation-time`, `x-queue-time`, `x-inference-time`, `x-time-per-token` (integer ms),
  `x-prompt-tokens`, `x-generated-tokens`, on non-streaming responses (router/src/server.rs);
- llama-cpp-python: `openai-processing-ms` (its route handler's time, integer ms);
- llama.cpp's server: a `timings` object in the JSON body or in the last stream event
  (`prompt_n`, `prompt_ms`, `predicted_n`, `predicted_ms`, `cache_n`, ...; tools/server/server-common.cpp).

Headers become `http.response.header.<name>` (OpenTelemetry HTTP semantic conventions: a string array);
`timings` fields become `llama_cpp.timings.<field>`. `budgetscope.client.stream` says whether the response
was streamed. The source adapters (budgetscope/sources/) read these attributes; nothing here interprets them.

`LoadgenClientTracer` is a `ClientTracer` whose spans carry these extra attributes.
"""

from __future__ import annotations

import atexit
import os
import weakref
from dataclasses import dataclass, field
from typing import Any

from budgetscope.instrument.client import ClientRequest, ClientSpanBuilder, ClientTracer, client_attributes

CAPTURED_HEADERS = (
    b"x-total-time", b"x-validation-time", b"x-queue-time", b"x-inference-time", b"x-time-per-token",
    b"x-prompt-tokens", b"x-generated-tokens", b"x-compute-time", b"x-compute-type", b"openai-processing-ms",
)
"""Response headers kept on the client span (lower case, as `HttpConnection` gives them)."""
HEADER_PREFIX = "http.response.header."
TIMINGS_PREFIX = "llama_cpp.timings."
CLIENT_STREAM = "budgetscope.client.stream"
"""Bool: the request asked for a streamed (SSE) response."""


def header_attributes(headers: dict[bytes, bytes]) -> dict[str, list[str]]:
    """The captured response headers as `http.response.header.<name>` → [value] attributes."""
    out = {}
    for name in CAPTURED_HEADERS:
        value = headers.get(name)
        if value is not None:
            out[HEADER_PREFIX + name.decode()] = [value.decode("latin-1")]
    return out


def timings_attributes(timings: Any) -> dict[str, float]:
    """llama.cpp's `timings` object as `llama_cpp.timings.<field>` attributes (numbers only; others dropped)."""
    if not isinstance(timings, dict):
        return {}
    return {TIMINGS_PREFIX + k: v for k, v in timings.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


@dataclass(slots=True)
class ReportedClientRequest(ClientRequest):
    """A `ClientRequest` plus the attributes the server reported (see the module docstring)."""

    extra_attributes: dict[str, Any] = field(default_factory=dict)


class ReportedSpanBuilder(ClientSpanBuilder):
    """Builds `llm.client.request` spans with the server-reported attributes added."""

    def build(self, rec: ClientRequest) -> list[Any]:
        extra = getattr(rec, "extra_attributes", None)
        if not extra:
            return super().build(rec)
        from opentelemetry.sdk.trace import ReadableSpan

        (span,) = super().build(rec)
        attrs = client_attributes(rec) | extra
        return [ReadableSpan(
            name=span.name, context=span.context, parent=None, resource=span.resource, attributes=attrs,
            kind=span.kind, status=span.status, start_time=span.start_time, end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )]


class LoadgenClientTracer(ClientTracer):
    """A `ClientTracer` (same arguments) whose spans also carry what the server reported."""

    def __init__(self, service_name: str = "budgetscope-loadgen", exporter: Any = None, enabled: bool = True,
                 *, max_queued_requests: int = 65536, schedule_delay_s: float = 1.0) -> None:
        from budgetscope.instrument.exporters import resolve_exporter

        self.service_name = os.environ.get("OTEL_SERVICE_NAME") or service_name
        self._worker = None
        span_exporter = resolve_exporter(exporter) if enabled else None
        if span_exporter is not None:
            from budgetscope.instrument.client import _shutdown_at_exit
            from budgetscope.instrument.export_worker import ExportWorker
            from budgetscope.instrument.instrumentation import _resource

            builder = ReportedSpanBuilder(_resource(self.service_name))
            self._worker = ExportWorker(builder.build, span_exporter, schedule_delay_s=schedule_delay_s,
                                        max_batch_spans=512, max_queued_records=max_queued_requests)
            atexit.register(_shutdown_at_exit, weakref.ref(self))
