"""`Instrumentation`: the entry point a service holds: starts requests, records engine steps, exports.

Look-ups happen once, here (exporter, resource, batching knobs); the per-request objects only record.
"""

from __future__ import annotations

import os
from typing import Any

import budgetscope.instrument.process_exit as process_exit
from budgetscope.instrument.attributes import DEFAULT_OPERATION, DEFAULT_PROVIDER, DEFAULT_TIER
from budgetscope.instrument.clock import as_unix_span
from budgetscope.instrument.context import _current
from budgetscope.instrument.export_worker import ExportWorker
from budgetscope.instrument.exporters import resolve_exporter, sdk_disabled
from budgetscope.instrument.noop_request import NOOP_REQUEST, NoopRequestTrace
from budgetscope.instrument.records import EngineStep
from budgetscope.instrument.request_trace import RequestTrace
from budgetscope.instrument.traceparent import SAMPLED, parse_traceparent


class Instrumentation:
    """Request and engine-step tracing for one service, exported per the span contract of docs/design.md.

    `exporter`: None (`OTEL_TRACES_EXPORTER`; unset: "otlp" when an OTLP endpoint is set, else nothing), "otlp", "console",
    "jsonl:<path>", or a SpanExporter instance (e.g. InMemorySpanExporter). `enabled=False` makes every
    call a near-free no-op, and so does `OTEL_SDK_DISABLED=true`. `provider_name` is the root span's
    `gen_ai.provider.name` (your serving system: `vllm`, `sglang`, …; None leaves it out).
    `OTEL_SERVICE_NAME`, when set, overrides `service_name`;
    `OTEL_RESOURCE_ATTRIBUTES` adds resource attributes. `OTEL_BSP_SCHEDULE_DELAY` (ms) and
    `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (spans) tune the export batches.
    """

    def __init__(
        self,
        service_name: str = "budgetscope",
        exporter: Any = None,
        enabled: bool = True,
        *,
        max_queued_requests: int = 8192,
        provider_name: str | None = DEFAULT_PROVIDER,
    ) -> None:
        self.enabled = enabled and not sdk_disabled()
        self.service_name = os.environ.get("OTEL_SERVICE_NAME") or service_name
        self._worker = None
        self._submit = None
        span_exporter = resolve_exporter(exporter) if enabled else None
        if span_exporter is not None:
            # Imported here so that `import budgetscope.instrument` never loads the OpenTelemetry SDK.
            from budgetscope.instrument.span_builder import SpanBuilder

            builder = SpanBuilder(_resource(self.service_name), provider_name)
            self._worker = ExportWorker(
                builder.build,
                span_exporter,
                schedule_delay_s=_env_int("OTEL_BSP_SCHEDULE_DELAY", 1000) / 1000,
                max_batch_spans=_env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
                max_queued_records=max_queued_requests,
            )
            self._submit = self._worker.submit
            process_exit.register(self)  # flushed at exit and on SIGTERM

    @property
    def is_exporting(self) -> bool:
        """Whether finished requests are built into spans and exported (False: none configured or disabled)."""
        return self._worker is not None

    @property
    def dropped_requests(self) -> int:
        """Requests and steps dropped because the export queue was full (or after shutdown)."""
        return self._worker.dropped if self._worker is not None else 0

    def start_request(
        self,
        model: str | None = None,
        tier: str | None = DEFAULT_TIER,
        tenant: str | None = None,
        traceparent: str | None = None,
        request_id: str | None = None,
        operation: str = DEFAULT_OPERATION,
    ) -> RequestTrace | NoopRequestTrace:
        """Start a request now (server receive; the `frontend` stage starts here) and make it current.

        `traceparent`: the incoming W3C header; the root span joins that trace as a child of its span (an
        invalid header starts a new trace). A parent whose sampled flag is off (`-00`) is followed, as the
        OpenTelemetry SDK's default `parentbased_always_on` sampler does: the request is recorded but exports
        no span (how `sweep` keeps its pre-flight requests out of the archive). `request_id` becomes `gen_ai.response.id` (the root span id
        when None). Disabled: returns the shared no-op request.
        """
        if not self.enabled:
            return NOOP_REQUEST
        parent = parse_traceparent(traceparent) if traceparent else None
        sampled = parent is None or bool(parent.flags & SAMPLED)
        req = RequestTrace(
            self._submit if sampled else None,
            model=model,
            tier=tier,
            tenant=tenant,
            parent=parent,
            request_id=request_id,
            operation=operation,
        )
        _current.set(req)
        return req

    def step(
        self,
        *,
        start_ns: int,
        end_ns: int,
        batch_size: int,
        prefill_tokens: int,
        decode_seqs: int,
        kv_blocks_used: int,
        kv_blocks_total: int,
        queue_depth: int,
        preempted: int,
        max_seqs: int | None = None,
        token_budget: int | None = None,
    ) -> None:
        """Record one engine step as an `engine.step` span (its own trace).

        `start_ns`/`end_ns`: Unix-epoch ns (`time.time_ns()`); `time.perf_counter_ns()` readings are
        recognised (they are below 1990) and converted. Counts: sequences in the batch, prompt tokens
        prefilled, sequences decoded, KV blocks in use / in the pool, requests waiting, sequences preempted; the
        engine's limits (running sequences, tokens a step), optional, let a report tell which one a queue waited on.
        """
        if self._submit is None:
            return
        start_ns, end_ns = as_unix_span(start_ns, end_ns)
        self._submit(
            EngineStep(
                start_ns,
                end_ns,
                batch_size,
                prefill_tokens,
                decode_seqs,
                kv_blocks_used,
                kv_blocks_total,
                queue_depth,
                preempted,
                max_seqs,
                token_budget,
            )
        )

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Build and export every finished request and step so far; True when done within `timeout_s`."""
        return self._worker.flush(timeout_s) if self._worker is not None else True

    def shutdown(self, timeout_s: float = 30.0) -> str:
        """Flush, stop the export thread and shut the exporter down. Later requests are not exported.
        Returns what could not be exported within `timeout_s` ("" when everything went out)."""
        return self._worker.shutdown(timeout_s) if self._worker is not None else ""


def _resource(service_name: str) -> Any:
    # imported on use: the OpenTelemetry SDK 54 ms to import
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    # Resource.create reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME (which wins over service_name).
    resource = Resource.create({SERVICE_NAME: service_name})
    if os.environ.get("OTEL_SERVICE_NAME"):
        resource = resource.merge(Resource({SERVICE_NAME: os.environ["OTEL_SERVICE_NAME"]}))
    return resource


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
