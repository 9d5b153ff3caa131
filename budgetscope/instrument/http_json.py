"""OTLP over HTTP with JSON bodies (`OTEL_EXPORTER_OTLP_PROTOCOL=http/json`), for traces and metrics.

The OpenTelemetry Python SDK ships http/protobuf and grpc exporters only. This one encodes with the SDK's own
protobuf encoders (`opentelemetry-exporter-otlp-proto-common`, installed with the `instrument` extra) and writes
the OTLP/JSON mapping: lowerCamelCase field names, enums as integers, 64-bit integers as strings, trace and span
ids as hex (not base64). Configuration is the standard one:

- endpoint: `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT` as is, else `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/<signal>`,
  else `http://localhost:4318/v1/<signal>`;
- headers: `OTEL_EXPORTER_OTLP_[<SIGNAL>_]HEADERS` (`k=v,k2=v2`, values URL-encoded);
- timeout: `OTEL_EXPORTER_OTLP_[<SIGNAL>_]TIMEOUT` in ms (default 10000), for one export with its retries;
- compression: `OTEL_EXPORTER_OTLP_[<SIGNAL>_]COMPRESSION` = `gzip` or none.

429, 502, 503 and 504 are retried with exponential back-off (honouring Retry-After) until the timeout.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import os
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import unquote

_log = logging.getLogger(__name__)
_RETRYABLE = {429, 502, 503, 504}
_ID_KEYS = {"traceId", "spanId", "parentSpanId"}


def _env(signal: str, name: str) -> str | None:
    return os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_{name}") or os.environ.get(f"OTEL_EXPORTER_OTLP_{name}")


def endpoint(signal: str) -> str:
    """The URL exports of `signal` ("traces" or "metrics") are POSTed to."""
    own = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    if own:
        return own
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
    return base.rstrip("/") + f"/v1/{signal}"


def headers(signal: str) -> dict[str, str]:
    """The extra request headers of `signal` (`k=v,k2=v2`, URL-decoded)."""
    out = {}
    for part in (_env(signal, "HEADERS") or "").split(","):
        key, sep, value = part.partition("=")
        if sep and key.strip():
            out[unquote(key.strip())] = unquote(value.strip())
    return out


def to_otlp_json(message: Any) -> dict:
    """A protobuf OTLP export request as its OTLP/JSON document (ids in hex, enums as integers)."""
    # imported on use: protobuf 57 ms to import
    from google.protobuf.json_format import MessageToDict

    return _hex_ids(MessageToDict(message, use_integers_for_enums=True))


def _hex_ids(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: (base64.b64decode(v).hex() if k in _ID_KEYS and isinstance(v, str) else _hex_ids(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


class OtlpHttpJsonExporter:
    """A SpanExporter (signal "traces") or MetricExporter-like (signal "metrics", `export(MetricsData)`) that
    POSTs OTLP/JSON."""

    def __init__(self, signal: str = "traces") -> None:
        if signal not in ("traces", "metrics"):
            raise ValueError(f"unknown signal {signal!r}")
        self.signal = signal
        self.endpoint = endpoint(signal)
        self.headers = {"Content-Type": "application/json", **headers(signal)}
        self.timeout_s = float(_env(signal, "TIMEOUT") or 10000) / 1000
        self.gzip = (_env(signal, "COMPRESSION") or "").strip().lower() == "gzip"
        if self.gzip:
            self.headers["Content-Encoding"] = "gzip"
        self._shutdown = False

    def _results(self):
        if self.signal == "traces":
            # imported on use: the OpenTelemetry SDK 54 ms to import
            from opentelemetry.sdk.trace.export import SpanExportResult

            return SpanExportResult.SUCCESS, SpanExportResult.FAILURE
        # imported on use: the OpenTelemetry SDK 54 ms to import
        from opentelemetry.sdk.metrics.export import MetricExportResult

        return MetricExportResult.SUCCESS, MetricExportResult.FAILURE

    def _encode(self, data: Any) -> bytes:
        if self.signal == "traces":
            # imported on use: the OTLP encoders 226 ms to import
            from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

            message = encode_spans(data)
        else:
            # imported on use: the OTLP encoders 226 ms to import
            from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

            message = encode_metrics(data)
        body = json.dumps(to_otlp_json(message), separators=(",", ":")).encode()
        return gzip.compress(body) if self.gzip else body

    def export(self, data: Any, timeout_millis: float | None = None, **_: Any) -> Any:
        """POST one export; SUCCESS once the receiver answered 2xx."""
        ok, failed = self._results()
        if self._shutdown:
            return failed
        body = self._encode(data)
        deadline = time.monotonic() + (timeout_millis / 1000 if timeout_millis else self.timeout_s)
        delay = 0.5
        while True:
            left = deadline - time.monotonic()
            retry_after = None
            try:
                request = urllib.request.Request(self.endpoint, data=body, headers=self.headers, method="POST")
                with urllib.request.urlopen(request, timeout=max(left, 0.1)) as resp:
                    resp.read()
                return ok
            except urllib.error.HTTPError as e:
                if e.code not in _RETRYABLE:
                    _log.warning("OTLP http/json export to %s failed: HTTP %s", self.endpoint, e.code)
                    return failed
                retry_after = e.headers.get("Retry-After")
            except OSError as e:
                _log.warning("OTLP http/json export to %s failed: %s", self.endpoint, e)
            wait = float(retry_after) if retry_after and retry_after.isdigit() else delay
            if time.monotonic() + wait > deadline:
                return failed
            time.sleep(wait)
            delay *= 2

    def force_flush(self, timeout_millis: float = 30000) -> bool:
        """Nothing is buffered here."""
        return True

    def shutdown(self, timeout_millis: float = 30000, **_: Any) -> None:
        """Export nothing more."""
        self._shutdown = True


class DisabledExporter:
    """What `OTEL_SDK_DISABLED=true` leaves of an exporter: it accepts everything and sends nothing."""

    def export(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        # imported on use: the OpenTelemetry SDK 54 ms to import
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 30000) -> bool:
        return True

    def shutdown(self, *args: Any, **kwargs: Any) -> None:
        pass
