"""Decoder for binary OTLP protobuf trace exports (`ExportTraceServiceRequest`)."""

from __future__ import annotations

import base64
import struct

import orjson
from google.protobuf.message import DecodeError

from budgetscope.ingest.otlp_json import double
from budgetscope.ingest.spanbatch import BadBatch, SpanBatch
from budgetscope.schema import EVENTS_KEY


def _any(v):
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()  # as OTLP/JSON writes bytes
    if which == "double_value":
        return double(v.double_value)
    return getattr(v, which)


def _attrs(kvs) -> dict:
    return {kv.key: _any(kv.value) for kv in kvs}


def _span_attrs(s) -> dict:
    """A span's attributes, with its events (if any) under `EVENTS_KEY`, as the OTLP/JSON decoder keeps them."""
    attrs = _attrs(s.attributes)
    if s.events:
        attrs[EVENTS_KEY] = [
            {"name": e.name or None, "time_unix_nano": e.time_unix_nano, "attributes": _attrs(e.attributes)}
            for e in s.events
        ]
    return attrs


def _service(kvs) -> str | None:
    """The first `service.name` attribute's string value (None when it is not a string), as every OTLP/JSON path
    takes it: an export sent as JSON and as protobuf stores the same service."""
    for kv in kvs:
        if kv.key == "service.name":
            return kv.value.string_value if kv.value.WhichOneof("value") == "string_value" else None
    return None


def decode(payload: bytes) -> SpanBatch:
    """Decode one serialized `ExportTraceServiceRequest`."""
    # imported on use: the OTLP protobuf classes 64 ms to import
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    msg = ExportTraceServiceRequest()
    try:
        msg.ParseFromString(payload)
    except DecodeError as e:
        raise BadBatch(f"not an OTLP protobuf trace export ({e})") from None
    if payload and not msg.resource_spans:
        # proto3 decodes any bytes made only of unknown fields as an empty message: that is not an export.
        raise BadBatch("not an OTLP protobuf trace export (no resource spans in a non-empty message)")
    batch = SpanBatch()
    for rs in msg.resource_spans:
        res = _attrs(rs.resource.attributes)
        service = _service(rs.resource.attributes)
        res_json = orjson.dumps(res)
        for ss in rs.scope_spans:
            scope = ss.scope.name or None
            for s in ss.spans:
                batch.append(
                    s.trace_id.hex(),
                    s.span_id.hex(),
                    s.parent_span_id.hex() or None,
                    s.name,
                    s.kind,
                    s.start_time_unix_nano,
                    s.end_time_unix_nano,
                    service,
                    scope,
                    s.status.code,
                    orjson.dumps(_span_attrs(s)),
                    res_json,
                )
    return batch


def split_messages(data: bytes) -> list[bytes]:
    """Split a protobuf trace file into messages.

    Two layouts exist in the wild: one bare message (an HTTP body saved to disk), or the OpenTelemetry
    Collector file exporter's `format: proto`, where each message is preceded by its size as a 4-byte
    big-endian integer. The framed layout is taken when its sizes tile the file exactly.
    """
    out, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">I", data, pos)
        if size == 0 or pos + 4 + size > len(data):
            break
        out.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    if out and pos == len(data):
        return out
    return [data]
