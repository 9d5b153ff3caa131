"""`RequestTrace`: one request's stage marks and token times, recorded cheaply on the hot path.

Hot path (`mark`, `token`): one `perf_counter_ns()` and one list append, no OpenTelemetry. `finish()`
hands the record to the export worker, which builds the spans in its own thread.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable
from typing import Any

from budgetscope.instrument.attributes import (
    DEFAULT_OPERATION,
    DEFAULT_TIER,
    MARKABLE_STAGES,
    OUTCOMES,
    REQUEST_OWNED_KEYS,
)
from budgetscope.instrument.clock import anchor, now_ns
from budgetscope.instrument.context import _current, stage, unknown_stage_error
from budgetscope.instrument.records import FinishedRequest
from budgetscope.instrument.traceparent import (
    SAMPLED,
    TraceParent,
    format_traceparent,
    new_span_id,
    new_trace_id,
)

_STAGES = frozenset(MARKABLE_STAGES)
_FINISH_LOCK = threading.Lock()
_INT64_MAX = 2**63 - 1


class RequestFinishedError(RuntimeError):
    """`finish()` was called on a request that had already finished."""


class RequestTrace:
    """One server request: receive time, stage marks, output-token times, outcome.

    Made by `Instrumentation.start_request()`. The `frontend` stage starts at receive. `model`, `tier`,
    `tenant`, `operation` and `request_id` may be assigned until `finish()` (e.g. once the body is parsed).
    """

    __slots__ = (
        "_submit",
        "_anchor",
        "_marks",
        "_tokens",
        "_stage",
        "_finished",
        "_trace_id",
        "_span_id",
        "_parent",
        "_extra",
        "_ctx_tokens",
        "model",
        "tier",
        "tenant",
        "operation",
        "request_id",
    )

    def __init__(
        self,
        submit: Callable[[FinishedRequest], None] | None,
        *,
        model: str | None = None,
        tier: str | None = DEFAULT_TIER,
        tenant: str | None = None,
        parent: TraceParent | None = None,
        request_id: str | None = None,
        operation: str = DEFAULT_OPERATION,
    ) -> None:
        self._anchor = anchor()
        self._marks: list[tuple[str, int, int]] = [("frontend", self._anchor[1], 0)]
        self._tokens: list[int] = []
        self._stage = "frontend"
        self._finished: str | None = None
        self._submit = submit
        self._parent = parent
        self._trace_id = parent.trace_id if parent is not None else new_trace_id()
        self._span_id = new_span_id()
        self._extra: dict[str, Any] | None = None
        self._ctx_tokens: list[Any] | None = None
        self.model = model
        self.tier = tier or DEFAULT_TIER
        self.tenant = tenant
        self.operation = operation
        self.request_id = request_id

    # -- hot path -------------------------------------------------------------------------------------

    def mark(self, stage: str) -> None:
        """End the current stage and start `stage` now. Marking the current stage again changes nothing.

        Raises ValueError for a name outside frontend, queue, prefill, decode, postprocess.
        """
        self.mark_at(stage, now_ns())

    def token(self) -> None:
        """One output token emitted now. A token outside `decode` (the first one, or the first after a
        preemption re-queue) ends the current stage and starts `decode`."""
        self.token_at(now_ns())

    def mark_at(self, stage: str, t: int) -> None:
        """`mark(stage)` taken at `t`, a `perf_counter_ns()` reading of this host (CLOCK_MONOTONIC: the same in
        every process), e.g. by the engine process of `engine serve`. Readings must come in time order."""
        if stage != self._stage:
            if stage not in _STAGES:
                raise unknown_stage_error(stage)
            self._stage = stage
            self._marks.append((stage, t, len(self._tokens)))

    def token_at(self, t: int) -> None:
        """`token()` taken at `t`, a `perf_counter_ns()` reading (as `mark_at`)."""
        if self._stage != "decode":
            self._stage = "decode"
            self._marks.append(("decode", t, len(self._tokens)))
        self._tokens.append(t)

    # -- request attributes and end ------------------------------------------------------------------

    def set(self, key: str, value: Any) -> None:
        """Set an extra attribute on the root span: str, bool, int, float, or a list of one of those.

        Keys the API sets itself (model, tier, outcome, token counts...) are refused with the argument to
        use instead.
        """
        if key in REQUEST_OWNED_KEYS:
            raise ValueError(f"attribute {key!r} is set by {REQUEST_OWNED_KEYS[key]}, not by set()")
        if self._extra is None:
            self._extra = {}
        self._extra[key] = _attribute_value(key, value)

    def finish(
        self,
        outcome: str = "ok",
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cached_tokens: int | None = None,
        error_type: str | None = None,
    ) -> None:
        """End the request now with `outcome` (ok, rejected, cancelled, error, timeout) and token counts.

        `output_tokens` defaults to the number of `token()` calls; `input_tokens` and `cached_tokens`
        (prefix-cache hits) are left out when None. `error_type` becomes `error.type`. Spans are built
        later in the export thread. Raises RequestFinishedError when the request already finished.
        """
        end = now_ns()
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}; valid outcomes: {', '.join(OUTCOMES)}")
        input_tokens = _count("input_tokens", input_tokens)
        output_tokens = _count("output_tokens", output_tokens)
        cached_tokens = _count("cached_tokens", cached_tokens)
        with _FINISH_LOCK:
            if self._finished is not None:
                raise RequestFinishedError(
                    f"request {self.request_id or self.span_id} already finished with outcome "
                    f"{self._finished!r}; finish() is called once per request"
                )
            self._finished = outcome
        if _current.get() is self:  # a finished request stops being current where it finished
            _current.set(None)
        # Late marks from another thread land in fresh lists, never in the record being built.
        marks, self._marks = self._marks, []
        tokens, self._tokens = self._tokens, []
        if self._submit is None:
            return
        self._submit(
            FinishedRequest(
                trace_id=self._trace_id,
                span_id=self._span_id,
                parent=self._parent,
                anchor=self._anchor,
                marks=marks,
                token_ns=tokens,
                end_ns=end,
                model=self.model,
                tier=self.tier,
                tenant=self.tenant,
                operation=self.operation,
                request_id=self.request_id,
                outcome=outcome,
                input_tokens=input_tokens,
                output_tokens=len(tokens) if output_tokens is None else output_tokens,
                cached_tokens=cached_tokens,
                error_type=error_type,
                extra=self._extra,
            )
        )

    # -- forms and properties ---------------------------------------------------------------------------

    def stage(self, name: str) -> stage:
        """`with req.stage("frontend"): ...` marks `name` on entry (it lasts until the next mark)."""
        return stage(name, self)

    def __enter__(self) -> RequestTrace:
        """Make this request current (for `@stage` and `current_request()`) until the block ends."""
        if self._ctx_tokens is None:
            self._ctx_tokens = []
        self._ctx_tokens.append(_current.set(self))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        """Finish the request if the block did not: `ok`, or the outcome an escaping exception implies."""
        if self._ctx_tokens:
            _current.reset(self._ctx_tokens.pop())
        if self._finished is None:
            if exc_type is None:
                self.finish("ok")
            else:
                self.finish(_outcome_of(exc_type), error_type=exc_type.__qualname__)
        elif _current.get() is self:
            _current.set(None)
        return False

    @property
    def trace_id(self) -> str:
        """Trace id, 32 hex digits."""
        return f"{self._trace_id:032x}"

    @property
    def span_id(self) -> str:
        """Root span id, 16 hex digits."""
        return f"{self._span_id:016x}"

    @property
    def traceparent(self) -> str:
        """W3C `traceparent` of the root span, to pass downstream."""
        return format_traceparent(self._trace_id, self._span_id, SAMPLED)

    @property
    def current_stage(self) -> str:
        """The stage running now."""
        return self._stage

    @property
    def num_tokens(self) -> int:
        """Output tokens recorded so far by `token()`."""
        return len(self._tokens)

    @property
    def is_finished(self) -> bool:
        """Whether `finish()` was called."""
        return self._finished is not None

    @property
    def outcome(self) -> str | None:
        """The outcome given to `finish()`, None before."""
        return self._finished


def _outcome_of(exc_type: type[BaseException]) -> str:
    import asyncio  # only here: importing the package stays light

    if issubclass(exc_type, asyncio.CancelledError):
        return "cancelled"
    if issubclass(exc_type, TimeoutError):
        return "timeout"
    return "error"


def _count(name: str, value: Any) -> int | None:
    """A token count as a plain int (numpy ints accepted); ValueError unless None or 0..2**63-1."""
    if value is None:
        return None
    try:
        count = operator.index(value)
    except TypeError:
        count = -1
    if not 0 <= count <= _INT64_MAX or isinstance(value, bool):
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return count


_SCALARS = (str, bool, int, float)


def _attribute_value(key: str, value: Any) -> Any:
    """Check an attribute value against the OTLP types; lists become tuples. TypeError otherwise."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (list, tuple)):
        kinds = {type(v) for v in value}
        if len(kinds) <= 1 and kinds <= {str, bool, int, float}:
            return tuple(value)
    raise TypeError(f"attribute {key!r}: value must be str, bool, int, float or a list of one of those, got {value!r}")
