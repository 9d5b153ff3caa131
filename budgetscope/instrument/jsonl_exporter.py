"""`OtlpJsonLinesExporter`: spans to a local file, one OTLP/JSON `ExportTraceServiceRequest` a line.

The same layout the OpenTelemetry Collector's `file` exporter writes, so `budgetscope ingest` and any
OTLP tool read it. Lines are appended; a file can take several runs.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import IO

import orjson
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from budgetscope.instrument.otlp_json import encode_request

_log = logging.getLogger(__name__)


class OtlpJsonLinesExporter(SpanExporter):
    """Append each export batch to `path` as one OTLP/JSON line. The file is opened on first export."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._file: IO[bytes] | None = None
        self._lock = threading.Lock()
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write one line holding every span of the batch."""
        if not spans:
            return SpanExportResult.SUCCESS
        line = orjson.dumps(encode_request(spans)) + b"\n"
        with self._lock:
            if self._closed:
                return SpanExportResult.FAILURE
            try:
                if self._file is None:
                    parent = os.path.dirname(self.path)
                    if parent:
                        os.makedirs(parent, exist_ok=True)
                    self._file = open(self.path, "ab")  # noqa: SIM115 - held open across exports
                self._file.write(line)
                self._file.flush()
            except OSError as err:
                _log.warning("budgetscope: cannot write spans to %s: %s", self.path, err)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Lines are flushed as they are written; nothing waits."""
        return True

    def shutdown(self) -> None:
        """Close the file; later exports fail."""
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()
                self._file = None
