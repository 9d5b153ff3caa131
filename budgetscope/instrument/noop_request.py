"""`NoopRequestTrace`: what a disabled `Instrumentation` hands out; every call does nothing.

One shared instance, so a disabled `start_request()` costs one attribute check and a return: the A side of
an overhead A/B.
"""

from __future__ import annotations

from typing import Any

from budgetscope.instrument.attributes import DEFAULT_OPERATION, DEFAULT_TIER


class _NoopStage:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> bool:
        return False


_NOOP_STAGE = _NoopStage()


class NoopRequestTrace:
    """The `RequestTrace` interface, doing nothing. `traceparent` is None: there is no span to join."""

    __slots__ = ()
    model = None
    tier = DEFAULT_TIER
    tenant = None
    operation = DEFAULT_OPERATION
    request_id = None
    trace_id = ""
    span_id = ""
    traceparent = None
    current_stage = "frontend"
    num_tokens = 0
    is_finished = False
    outcome = None

    def __setattr__(self, key: str, value: Any) -> None:
        return None

    def mark(self, stage: str) -> None:
        return None

    def token(self) -> None:
        return None

    def mark_at(self, stage: str, t: int) -> None:
        return None

    def token_at(self, t: int) -> None:
        return None

    def set(self, key: str, value: Any) -> None:
        return None

    def finish(self, outcome: str = "ok", **counts: Any) -> None:
        return None

    def stage(self, name: str) -> _NoopStage:
        return _NOOP_STAGE

    def __enter__(self) -> NoopRequestTrace:
        return self

    def __exit__(self, *exc_info: object) -> bool:
        return False


NOOP_REQUEST = NoopRequestTrace()
