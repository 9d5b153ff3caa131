"""OTLP/JSON encoding of spans: one `ExportTraceServiceRequest` as a dict, as the Collector writes it.

Follows the OTLP/JSON rules (https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding):
lowerCamelCase keys, trace/span ids as hex (not base64), 64-bit integers as decimal strings, enums
(`kind`, `status.code`) as integers, fields at their default value left out. Same grouping as the
OpenTelemetry Python OTLP encoder: resource -> scope -> spans.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from typing import Any

# SDK SpanKind (INTERNAL=0, SERVER=1, ...) -> OTLP Span.SpanKind (INTERNAL=1, SERVER=2, ...).
_KIND = {0: 1, 1: 2, 2: 3, 3: 4, 4: 5}
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200


def encode_request(spans: Sequence[Any]) -> dict[str, Any]:
    """`ExportTraceServiceRequest` for SDK `ReadableSpan`s, as an OTLP/JSON dict."""
    # Grouped by object identity first: Resource.__hash__ serialises its attributes on every call.
    by_resource: dict[int, tuple[Any, dict[int, tuple[Any, list[dict[str, Any]]]]]] = {}
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope
        scopes = by_resource.setdefault(id(resource), (resource, {}))[1]
        scopes.setdefault(id(scope), (scope, []))[1].append(encode_span(span))
    merged: dict[Any, dict[Any, list[dict[str, Any]]]] = {}
    for resource, scopes in by_resource.values():
        for scope, encoded in scopes.values():
            merged.setdefault(resource, {}).setdefault(scope, []).extend(encoded)
    resource_spans = []
    for resource, scopes in merged.items():
        scope_spans = []
        for scope, encoded in scopes.items():
            entry: dict[str, Any] = {"scope": _scope(scope), "spans": encoded}
            if scope is not None and scope.schema_url:
                entry["schemaUrl"] = scope.schema_url
            scope_spans.append(entry)
        entry = {"resource": _with_attributes({}, resource.attributes), "scopeSpans": scope_spans}
        if resource.schema_url:
            entry["schemaUrl"] = resource.schema_url
        resource_spans.append(entry)
    return {"resourceSpans": resource_spans}


def encode_span(span: Any) -> dict[str, Any]:
    """One span (an SDK `ReadableSpan`) as an OTLP/JSON dict."""
    ctx = span.context
    out: dict[str, Any] = {"traceId": f"{ctx.trace_id:032x}", "spanId": f"{ctx.span_id:016x}"}
    trace_state = _trace_state(ctx.trace_state)
    if trace_state:
        out["traceState"] = trace_state
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    out["flags"] = _flags(span.parent)
    out["name"] = span.name
    out["kind"] = _KIND[span.kind.value]
    out["startTimeUnixNano"] = str(span.start_time)
    out["endTimeUnixNano"] = str(span.end_time)
    _with_attributes(out, span.attributes)
    if span.dropped_attributes:
        out["droppedAttributesCount"] = span.dropped_attributes
    if span.events:
        out["events"] = [_event(event) for event in span.events]
    if span.dropped_events:
        out["droppedEventsCount"] = span.dropped_events
    if span.links:
        out["links"] = [_link(link) for link in span.links]
    if span.dropped_links:
        out["droppedLinksCount"] = span.dropped_links
    out["status"] = _status(span.status)
    return out


def any_value(value: Any) -> dict[str, Any]:
    """An attribute value as an OTLP/JSON `AnyValue`."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": _double(value)}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Mapping):
        return {"kvlistValue": _with_attributes({}, value, key="values")}
    if isinstance(value, Sequence):
        if not value:
            return {"arrayValue": {}}
        if all(type(v) is float for v in value):  # a decode span's itl_ms: hundreds a request, one pass
            return {"arrayValue": {"values": [{"doubleValue": _double(v)} for v in value]}}
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    raise TypeError(f"cannot encode attribute value {value!r} in OTLP")


def _with_attributes(out: dict[str, Any], attributes: Mapping[str, Any] | None, key: str = "attributes"):
    if attributes:
        out[key] = [{"key": k, "value": any_value(v)} for k, v in attributes.items()]
    return out


def _double(value: float) -> float | str:
    return value if math.isfinite(value) else _non_finite(value)


def _non_finite(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _scope(scope: Any) -> dict[str, Any]:
    if scope is None:
        return {}
    out: dict[str, Any] = {}
    if scope.name:
        out["name"] = scope.name
    if scope.version:
        out["version"] = scope.version
    return _with_attributes(out, getattr(scope, "attributes", None))


def _flags(parent: Any) -> int:
    if parent is not None and parent.is_remote:
        return _HAS_IS_REMOTE | _IS_REMOTE
    return _HAS_IS_REMOTE


def _trace_state(trace_state: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in trace_state.items()) if trace_state else ""


def _status(status: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if status is not None and status.status_code.value:
        out["code"] = status.status_code.value
    if status is not None and status.description:
        out["message"] = status.description
    return out


def _event(event: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"timeUnixNano": str(event.timestamp), "name": event.name}
    _with_attributes(out, event.attributes)
    if event.dropped_attributes:
        out["droppedAttributesCount"] = event.dropped_attributes
    return out


def _link(link: Any) -> dict[str, Any]:
    ctx = link.context
    out: dict[str, Any] = {"traceId": f"{ctx.trace_id:032x}", "spanId": f"{ctx.span_id:016x}"}
    trace_state = _trace_state(ctx.trace_state)
    if trace_state:
        out["traceState"] = trace_state
    _with_attributes(out, link.attributes)
    if link.dropped_attributes:
        out["droppedAttributesCount"] = link.dropped_attributes
    out["flags"] = _flags(link.context)
    return out
