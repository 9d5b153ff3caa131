"""The current request of a context (a contextvar) and `stage`, the context-manager/decorator form of a mark.

`Instrumentation.start_request()` and `with req:` make a request current; `stage("prefill")` then marks it
without passing the request around. A stage is bounded by marks, as docs/design.md defines the stages
(`frontend` = receive -> enqueued, ...): entering `stage(x)` marks x, and x lasts until the next mark or
`finish()`. Leaving the block marks nothing, so the time between the block and the next mark still counts
as x (the stage tiling of a request never has gaps).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

from budgetscope.instrument.attributes import MARKABLE_STAGES

F = TypeVar("F", bound=Callable[..., Any])


class Markable(Protocol):
    """What `stage` needs of a request: a `RequestTrace` (or its no-op twin), named here by what it does so that
    this module sits under `request_trace`, which imports it, and imports nothing back."""

    def mark(self, stage: str) -> None: ...


_current: ContextVar[Markable | None] = ContextVar("budgetscope_current_request", default=None)


def current_request() -> Markable | None:
    """The request made current in this context by `start_request()` or `with req:`, or None."""
    return _current.get()


def unknown_stage_error(name: object) -> ValueError:
    """The error for a stage name outside the vocabulary: names the stage and the valid ones."""
    return ValueError(f"unknown stage {name!r}; valid stages: {', '.join(MARKABLE_STAGES)}")


class stage:  # noqa: N801 - used as a decorator, named like one
    """Mark a stage on entry: `with stage("frontend"): ...` or `@stage("frontend")` on a (async) function.

    With `request=None` it marks `current_request()` (nothing when there is none); `req.stage(name)` binds
    a request. The stage lasts until the next mark, not until the block ends (see the module docstring).
    """

    __slots__ = ("name", "request")

    def __init__(self, name: str, request: Markable | None = None) -> None:
        if name not in MARKABLE_STAGES:
            raise unknown_stage_error(name)
        self.name = name
        self.request = request

    def __enter__(self) -> Markable | None:
        req = self.request if self.request is not None else _current.get()
        if req is not None:
            req.mark(self.name)
        return req

    def __exit__(self, *exc_info: object) -> bool:
        return False

    def __call__(self, fn: F) -> F:
        name, bound = self.name, self.request

        def _mark() -> None:
            req = bound if bound is not None else _current.get()
            if req is not None:
                req.mark(name)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                _mark()
                return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            _mark()
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
