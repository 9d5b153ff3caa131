"""`SpanBuilder`: records from the hot path -> OpenTelemetry `ReadableSpan`s of the span contract.

Runs in the export worker thread, never on the hot path. Imports the OpenTelemetry SDK, so it is imported
only when an exporter is configured.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

import budgetscope.instrument.attributes as A
from budgetscope import __version__
from budgetscope.instrument.records import EngineStep, FinishedRequest
from budgetscope.instrument.traceparent import new_span_id, new_trace_id

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)
_ERROR_OUTCOMES = frozenset({"error", "timeout"})
_STAGE_NAMES = {stage: A.stage_span_name(stage) for stage in A.MARKABLE_STAGES}
_STAGE_ATTRS = {stage: {A.STAGE: stage} for stage in A.MARKABLE_STAGES}


class SpanBuilder:
    """Builds the spans of finished requests and engine steps for one resource."""

    def __init__(self, resource: Resource, provider_name: str | None = A.DEFAULT_PROVIDER) -> None:
        self.resource = resource
        self.scope = InstrumentationScope(A.SCOPE_NAME, __version__)
        self.provider = {A.GEN_AI_PROVIDER_NAME: provider_name} if provider_name else {}

    def build(self, record: FinishedRequest | EngineStep) -> list[ReadableSpan]:
        """The spans of one record: root and stage spans of a request, or one `engine.step` span."""
        if type(record) is FinishedRequest:
            return self.request_spans(record)
        return [self.step_span(record)]

    def request_spans(self, rec: FinishedRequest) -> list[ReadableSpan]:
        """Root `{operation} {model}` (SERVER) then one `stage.<stage>` (INTERNAL) per stage segment, in time order.

        The segments tile [receive, finish]: each stage span ends where the next begins.
        """
        unix0 = rec.anchor[0] - rec.anchor[1]  # add to a perf_counter reading to get Unix-epoch ns
        start, end = rec.marks[0][1], max(rec.end_ns, rec.marks[-1][1])
        root_ctx = SpanContext(rec.trace_id, rec.span_id, is_remote=False, trace_flags=_SAMPLED)
        parent = None
        if rec.parent is not None:
            parent = SpanContext(
                rec.parent.trace_id, rec.parent.span_id, is_remote=True, trace_flags=TraceFlags(rec.parent.flags)
            )
        status = _UNSET
        if rec.outcome in _ERROR_OUTCOMES:
            status = Status(StatusCode.ERROR, rec.error_type or rec.outcome)
        spans = [
            ReadableSpan(
                name=A.request_span_name(rec.operation, rec.model),
                context=root_ctx,
                parent=parent,
                resource=self.resource,
                attributes={**self.provider, **_root_attributes(rec, unix0)},
                kind=SpanKind.SERVER,
                status=status,
                start_time=unix0 + start,
                end_time=unix0 + end,
                instrumentation_scope=self.scope,
            )
        ]
        tokens, marks = rec.token_ns, rec.marks
        seg_start = start
        for i, (stage, _, first_token) in enumerate(marks):
            if i + 1 < len(marks):
                seg_end, end_token = max(marks[i + 1][1], seg_start), marks[i + 1][2]
            else:
                seg_end, end_token = end, len(tokens)
            attrs: dict[str, Any] = _STAGE_ATTRS[stage]
            if stage == "decode":
                itl = [(tokens[j] - tokens[j - 1]) / 1e6 for j in range(max(first_token, 1), end_token)]
                attrs = {A.STAGE: stage, A.DECODE_ITL_MS: tuple(itl), A.DECODE_STEPS: len(itl)}
            spans.append(
                ReadableSpan(
                    name=_STAGE_NAMES[stage],
                    context=SpanContext(rec.trace_id, new_span_id(), is_remote=False, trace_flags=_SAMPLED),
                    parent=root_ctx,
                    resource=self.resource,
                    attributes=attrs,
                    kind=SpanKind.INTERNAL,
                    start_time=unix0 + seg_start,
                    end_time=unix0 + seg_end,
                    instrumentation_scope=self.scope,
                )
            )
            seg_start = seg_end
        return spans

    def step_span(self, step: EngineStep) -> ReadableSpan:
        """One `engine.step` span (INTERNAL), alone in its own trace."""
        attributes = {
            A.STEP_BATCH_SIZE: step.batch_size,
            A.STEP_PREFILL_TOKENS: step.prefill_tokens,
            A.STEP_DECODE_SEQS: step.decode_seqs,
            A.STEP_KV_BLOCKS_USED: step.kv_blocks_used,
            A.STEP_KV_BLOCKS_TOTAL: step.kv_blocks_total,
            A.STEP_QUEUE_DEPTH: step.queue_depth,
            A.STEP_PREEMPTED: step.preempted,
        }
        if step.max_seqs is not None:
            attributes[A.STEP_MAX_SEQS] = step.max_seqs
        if step.token_budget is not None:
            attributes[A.STEP_TOKEN_BUDGET] = step.token_budget
        return ReadableSpan(
            name=A.SPAN_ENGINE_STEP,
            context=SpanContext(new_trace_id(), new_span_id(), is_remote=False, trace_flags=_SAMPLED),
            resource=self.resource,
            kind=SpanKind.INTERNAL,
            start_time=step.start_ns,
            end_time=step.end_ns,
            instrumentation_scope=self.scope,
            attributes=attributes,
        )


def _root_attributes(rec: FinishedRequest, unix0: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {A.GEN_AI_OPERATION_NAME: rec.operation}
    if rec.model is not None:
        attrs[A.GEN_AI_REQUEST_MODEL] = rec.model
    attrs[A.GEN_AI_RESPONSE_ID] = rec.request_id if rec.request_id is not None else f"{rec.span_id:016x}"
    if rec.input_tokens is not None:
        attrs[A.GEN_AI_USAGE_INPUT_TOKENS] = rec.input_tokens
    if rec.output_tokens is not None:
        attrs[A.GEN_AI_USAGE_OUTPUT_TOKENS] = rec.output_tokens
    if rec.cached_tokens is not None:
        attrs[A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = rec.cached_tokens
    attrs[A.TIER] = rec.tier or A.DEFAULT_TIER
    if rec.tenant is not None:
        attrs[A.TENANT] = rec.tenant
    attrs[A.OUTCOME] = rec.outcome
    if rec.token_ns:
        attrs[A.FIRST_TOKEN_UNIX_NANO] = unix0 + rec.token_ns[0]
    if rec.error_type is not None:
        attrs[A.ERROR_TYPE] = rec.error_type
    if rec.extra:
        attrs.update(rec.extra)
    return attrs
