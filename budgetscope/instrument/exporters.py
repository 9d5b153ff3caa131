"""Which span exporter an `Instrumentation` uses: from its `exporter` argument or the `OTEL_*` variables.

Specs: None (read `OTEL_TRACES_EXPORTER`; unset means OpenTelemetry's default "otlp" when an OTLP endpoint is
set, else "none": `default_traces_exporter`), "none", "otlp" (OTLP over the protocol of
`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL`: http/protobuf by default, grpc, or
http/json; endpoint, headers, timeout and compression come from the usual `OTEL_EXPORTER_OTLP_*` variables, read
by the OpenTelemetry exporters themselves, or by `budgetscope.instrument.http_json` for http/json), "console",
"jsonl:<path>" (local OTLP JSON lines), a comma-separated list of those, or a ready `SpanExporter` instance.
`OTEL_SDK_DISABLED=true` turns every one of them off, as it does the OpenTelemetry SDK.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Sequence
from typing import Any

_log = logging.getLogger(__name__)
_INSTALL_HINT = "install the OpenTelemetry exporters: pip install 'budgetscope[instrument]'"
_KNOWN = "none, otlp, console, jsonl:<path>"


def sdk_disabled() -> bool:
    """`OTEL_SDK_DISABLED=true` (any case): every signal is a no-op, as in the OpenTelemetry SDK."""
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def default_traces_exporter() -> str:
    """The exporter spec when none is given: `OTEL_TRACES_EXPORTER`, else OpenTelemetry's default `otlp` when an
    OTLP endpoint variable is set, else `none`. The SDK's default is `otlp` even without an endpoint; budgetscope
    sends nothing until an endpoint says where, so that a service importing it never retries against a
    localhost:4318 that nobody asked for."""
    if spec := os.environ.get("OTEL_TRACES_EXPORTER", "").strip():
        return spec
    return "otlp" if any(os.environ.get(v, "").strip() for v in ENDPOINT_VARIABLES) else "none"


def resolve_exporter(spec: Any) -> Any | None:
    """The SpanExporter for `spec`, or None when nothing is to be exported (also when `OTEL_SDK_DISABLED` is
    true). ValueError on a bad spec."""
    if sdk_disabled():
        return None
    if spec is None:
        spec = default_traces_exporter()
    if not isinstance(spec, str):
        if not (callable(getattr(spec, "export", None)) and callable(getattr(spec, "shutdown", None))):
            raise TypeError(f"exporter must be a spec string or a SpanExporter, got {spec!r}")
        return spec
    exporters = [exp for part in spec.split(",") if (exp := _one(part.strip())) is not None]
    if not exporters:
        return None
    return exporters[0] if len(exporters) == 1 else FanOutExporter(exporters)


def _one(spec: str) -> Any | None:
    if spec in ("", "none"):
        return None
    if spec == "otlp":
        return otlp_exporter()
    if spec == "console":
        # imported on use: the OpenTelemetry SDK 54 ms to import
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if spec.startswith("jsonl:") and len(spec) > len("jsonl:"):
        # imported on use: concurrent.futures 92 ms, the OpenTelemetry SDK 54 ms, orjson 28 ms to import
        from budgetscope.instrument.jsonl_exporter import OtlpJsonLinesExporter

        return OtlpJsonLinesExporter(spec[len("jsonl:") :])
    raise ValueError(f"unknown trace exporter {spec!r}; valid: {_KNOWN}")


_OTLP_CLASSES = {  # signal → (module suffix, exporter class)
    "traces": ("trace_exporter", "OTLPSpanExporter"),
    "metrics": ("metric_exporter", "OTLPMetricExporter"),
}


def otlp_exporter(signal: str = "traces") -> Any:
    """The OpenTelemetry OTLP exporter of `signal` ("traces" or "metrics") for the configured protocol
    (`OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`, else http/protobuf), configured
    by its env variables. http/json is budgetscope's own exporter (the SDK has none); with `OTEL_SDK_DISABLED`
    true, an exporter that drops everything."""
    if sdk_disabled():
        # imported on use: ssl 26 ms to import
        from budgetscope.instrument.http_json import DisabledExporter

        return DisabledExporter()
    protocol = (
        os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    module, cls = _OTLP_CLASSES[signal]
    transports = {"http/protobuf": "http", "grpc": "grpc"}
    if protocol == "http/json":
        # imported on use: ssl 26 ms to import
        from budgetscope.instrument.http_json import OtlpHttpJsonExporter

        return OtlpHttpJsonExporter(signal)
    if protocol not in transports:
        raise ValueError(f"unsupported OTLP protocol {protocol!r}; valid: http/protobuf, grpc, http/json")
    try:
        mod = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{transports[protocol]}.{module}")
    except ImportError as err:
        raise ImportError(f"OTLP {protocol} export needs {err.name}; {_INSTALL_HINT}") from err
    return getattr(mod, cls)()


class FanOutExporter:
    """Sends every batch to several exporters (for `OTEL_TRACES_EXPORTER=otlp,console`)."""

    def __init__(self, exporters: Sequence[Any]) -> None:
        self.exporters = list(exporters)

    def export(self, spans: Sequence[Any]) -> Any:
        """Export to each; the result is the last failure, else success."""
        result = None
        for exporter in self.exporters:
            outcome = exporter.export(spans)
            if result is None or outcome.name != "SUCCESS":
                result = outcome
        return result

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush each; True when all flushed."""
        return all([exporter.force_flush(timeout_millis) for exporter in self.exporters])

    def shutdown(self) -> None:
        """Shut each down."""
        for exporter in self.exporters:
            exporter.shutdown()
