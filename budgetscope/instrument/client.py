"""Client spans: `{operation} {model}` (formerly `llm.client.request`; kind CLIENT) for a load generator or any client of an LLM server.

    tracer = ClientTracer(service_name="budgetscope-loadgen", exporter="jsonl:client.jsonl")
    trace_id, span_id = new_client_ids()
    headers["traceparent"] = format_traceparent(trace_id, span_id)  # the server root becomes its child
    ...
    tracer.record(ClientRequest(trace_id, span_id, scheduled_ns=..., start_ns=..., end_ns=..., ...))
    tracer.shutdown()

The hot path only appends a `ClientRequest` (plain data, Unix-epoch ns) to the export worker's queue; the
worker thread builds the OpenTelemetry span and exports it. Importing this module loads no SDK.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import budgetscope.instrument.process_exit as process_exit
from budgetscope import __version__
from budgetscope.instrument.attributes import (
    CLIENT_PROVIDER,
    DEFAULT_TIER,
    ERROR_TYPE,
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    SCOPE_NAME,
    SPAN_CLIENT_REQUEST,
    TENANT,
    TIER,
    request_span_name,
)
from budgetscope.instrument.export_worker import ExportWorker
from budgetscope.instrument.exporters import resolve_exporter
from budgetscope.instrument.instrumentation import _resource
from budgetscope.instrument.traceparent import new_span_id, new_trace_id

CLIENT_SCHEDULED_UNIX_NANO = "budgetscope.client.scheduled_unix_nano"
"""Int: Unix-epoch ns at which the open-loop plan meant to send the request (the span starts at the real send)."""
CLIENT_FIRST_TOKEN_UNIX_NANO = "budgetscope.client.first_token_unix_nano"
"""Int: Unix-epoch ns at which the client received the first output token (absent when none came)."""
CLIENT_ITL_MS = "budgetscope.client.itl_ms"
"""Double array: gaps in ms between consecutive output-token events as the client received them."""
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
HTTP_REQUEST_METHOD = "http.request.method"
URL_FULL = "url.full"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(slots=True)
class ClientRequest:
    """One finished client request. Times are Unix-epoch ns; `first_token_ns` is None when no token came."""

    trace_id: int
    span_id: int
    scheduled_ns: int
    start_ns: int
    """When the request was sent (the span starts here)."""
    end_ns: int
    first_token_ns: int | None = None
    itl_ms: tuple[float, ...] = ()
    status_code: int | None = None
    """HTTP status; None when no response came (connection refused, reset, timeout)."""
    output_tokens: int | None = None
    input_tokens: int | None = None
    tier: str | None = DEFAULT_TIER
    tenant: str | None = None
    model: str | None = None
    error_type: str | None = None
    url: str | None = None
    operation: str | None = None
    """`gen_ai.operation.name`: `text_completion` (/v1/completions) or `chat` (/v1/chat/completions)."""
    extra_attributes: dict[str, Any] = field(default_factory=dict)
    """More span attributes (e.g. what the server reported in its response headers); they win over none."""


def new_client_ids() -> tuple[int, int]:
    """A fresh (trace id, span id) for a client span; send them as `format_traceparent(trace_id, span_id)`."""
    return new_trace_id(), new_span_id()


class ClientTracer:
    """Exports `llm.client.request` spans built from `ClientRequest` records, off the caller's thread.

    `exporter`: None (`OTEL_TRACES_EXPORTER`; unset: `otlp` when an OTLP endpoint is set, else nothing), "otlp", "console", "jsonl:<path>",
    or a SpanExporter instance - the same specs as `Instrumentation`. `enabled=False` or no exporter makes
    `record` a no-op.
    """

    def __init__(
        self,
        service_name: str = "budgetscope-loadgen",
        exporter: Any = None,
        enabled: bool = True,
        *,
        max_queued_requests: int = 65536,
        schedule_delay_s: float = 1.0,
    ) -> None:
        self.service_name = os.environ.get("OTEL_SERVICE_NAME") or service_name
        self._worker = None
        span_exporter = resolve_exporter(exporter) if enabled else None
        if span_exporter is not None:
            builder = ClientSpanBuilder(_resource(self.service_name))
            self._worker = ExportWorker(
                builder.build,
                span_exporter,
                schedule_delay_s=schedule_delay_s,
                max_batch_spans=512,
                max_queued_records=max_queued_requests,
            )
            process_exit.register(self)  # flushed at exit and on SIGTERM

    @property
    def is_exporting(self) -> bool:
        """Whether records are built into spans and exported."""
        return self._worker is not None

    @property
    def dropped_requests(self) -> int:
        """Records dropped because the export queue was full."""
        return self._worker.dropped if self._worker is not None else 0

    def record(self, request: ClientRequest) -> None:
        """Queue one finished request for export (an append; no OpenTelemetry work on the caller's thread)."""
        if self._worker is not None:
            self._worker.submit(request)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Build and export everything recorded so far; True when done within `timeout_s`."""
        return self._worker.flush(timeout_s) if self._worker is not None else True

    def shutdown(self, timeout_s: float = 30.0) -> str:
        """Flush, stop the export thread, shut the exporter down. Returns what could not be exported within
        `timeout_s` ("" when everything went out)."""
        return self._worker.shutdown(timeout_s) if self._worker is not None else ""


class ClientSpanBuilder:
    """`ClientRequest` -> one client span (`{operation} {model}`) ReadableSpan (runs in the export thread)."""

    def __init__(self, resource: Any) -> None:
        # imported on use: the OpenTelemetry SDK 54 ms to import
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.resource = resource
        self.scope = InstrumentationScope(SCOPE_NAME, __version__)

    def build(self, rec: ClientRequest) -> list[Any]:
        """The span of one client request, as a one-element list (the export worker's builder shape)."""
        # imported on use: the OpenTelemetry SDK 54 ms, the OpenTelemetry API 21 ms to import
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        status = Status(StatusCode.UNSET)
        if rec.error_type is not None or (rec.status_code is not None and rec.status_code >= 400):
            status = Status(StatusCode.ERROR, rec.error_type or f"HTTP {rec.status_code}")
        context = SpanContext(rec.trace_id, rec.span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        return [
            ReadableSpan(
                name=request_span_name(rec.operation, rec.model, SPAN_CLIENT_REQUEST),
                context=context,
                parent=None,
                resource=self.resource,
                attributes=client_attributes(rec),
                kind=SpanKind.CLIENT,
                status=status,
                start_time=rec.start_ns,
                end_time=max(rec.end_ns, rec.start_ns),
                instrumentation_scope=self.scope,
            )
        ]


def client_attributes(rec: ClientRequest) -> dict[str, Any]:
    """The attributes of a client span (docs/design.md, "The span contract"), with the GenAI and HTTP client
    conventions' `gen_ai.provider.name`, `gen_ai.operation.name`, `server.address` and `server.port`."""
    attrs: dict[str, Any] = {
        GEN_AI_PROVIDER_NAME: CLIENT_PROVIDER,
        HTTP_REQUEST_METHOD: "POST",
        CLIENT_SCHEDULED_UNIX_NANO: rec.scheduled_ns,
    }
    if rec.operation is not None:
        attrs[GEN_AI_OPERATION_NAME] = rec.operation
    if rec.first_token_ns is not None:
        attrs[CLIENT_FIRST_TOKEN_UNIX_NANO] = rec.first_token_ns
    attrs[CLIENT_ITL_MS] = tuple(rec.itl_ms)
    if rec.status_code is not None:
        attrs[HTTP_RESPONSE_STATUS_CODE] = rec.status_code
    if rec.output_tokens is not None:
        attrs[GEN_AI_USAGE_OUTPUT_TOKENS] = rec.output_tokens
    if rec.input_tokens is not None:
        attrs[GEN_AI_USAGE_INPUT_TOKENS] = rec.input_tokens
    attrs[TIER] = rec.tier or DEFAULT_TIER
    if rec.tenant is not None:
        attrs[TENANT] = rec.tenant
    if rec.model is not None:
        attrs[GEN_AI_REQUEST_MODEL] = rec.model
    if rec.error_type is not None:
        attrs[ERROR_TYPE] = rec.error_type
    if rec.url is not None:
        attrs[URL_FULL] = rec.url
        attrs.update(_server(rec.url))
    attrs.update(rec.extra_attributes)
    return attrs


def _server(url: str) -> dict[str, Any]:
    """`server.address` and `server.port` of a request URL (the port from the scheme when the URL has none)."""
    try:
        parts = urlsplit(url)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return {}
    out: dict[str, Any] = {SERVER_ADDRESS: parts.hostname} if parts.hostname else {}
    if out and port is not None:
        out[SERVER_PORT] = port
    return out
