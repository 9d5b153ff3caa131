"""The engine's one seam onto `budgetscope.instrument`: the engine runs the same with it or without it."""

from __future__ import annotations

from typing import Any

from budgetscope.instrument import Instrumentation


class NullTrace:
    """A request trace that records nothing; what every request gets when instrumentation is off."""

    __slots__ = ()
    traceparent = None

    def mark(self, stage: str) -> None:
        pass

    def token(self) -> None:
        pass

    def mark_at(self, stage: str, t: int) -> None:
        pass

    def token_at(self, t: int) -> None:
        pass

    def set(self, key: str, value: Any) -> None:
        pass

    def finish(self, **_: Any) -> None:
        pass


NULL_TRACE = NullTrace()


class Telemetry:
    """Wraps an `Instrumentation` (or nothing) behind the calls the engine makes.

    The cheap exit comes first: with no instrumentation, or a disabled one, every call is a no-op.
    """

    def __init__(self, instrumentation: Any = None):
        self.instrumentation = instrumentation
        self.enabled = instrumentation is not None and bool(getattr(instrumentation, "enabled", True))

    @classmethod
    def create(cls, enabled: bool = True, exporter: Any = None, service_name: str = "budgetscope-engine") -> Telemetry:
        """Build on `budgetscope.instrument.Instrumentation` (light: it loads the OpenTelemetry SDK only to export).

        exporter: None (OTEL_* environment), "jsonl:/path", or an OpenTelemetry SpanExporter.
        """
        if not enabled:
            return cls(None)
        return cls(Instrumentation(service_name=service_name, exporter=exporter, enabled=True))

    @property
    def is_exporting(self) -> bool:
        """Whether spans leave the process (an exporter is configured)."""
        return self.enabled and bool(getattr(self.instrumentation, "is_exporting", False))

    def start_request(self, **fields: Any) -> Any:
        """A request trace started now (server receive); NULL_TRACE when off."""
        if not self.enabled:
            return NULL_TRACE
        return self.instrumentation.start_request(**fields)

    def step(self, **fields: Any) -> None:
        """Record one engine step (times in ns since the epoch)."""
        if self.enabled:
            self.instrumentation.step(**fields)

    def flush(self) -> None:
        if self.enabled:
            self.instrumentation.flush()

    def shutdown(self) -> None:
        if self.enabled:
            self.instrumentation.shutdown()
