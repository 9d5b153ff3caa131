"""The `google.rpc.Status` (with an optional `google.rpc.RetryInfo`) that OTLP error responses carry.

Encoded by hand: three tiny, frozen messages, so that the HTTP receiver needs no googleapis protos. The partial
success of an `ExportTraceServiceResponse` (the router's) is opentelemetry-proto's own message.
Wire layout (proto3): Status{1 code int32, 2 message string, 3 details repeated Any}, Any{1 type_url, 2 value},
RetryInfo{1 retry_delay Duration}, Duration{1 seconds int64, 2 nanos int32}.
"""

from __future__ import annotations

import orjson

INVALID_ARGUMENT = 3
RESOURCE_EXHAUSTED = 8
INTERNAL = 13
UNAVAILABLE = 14
UNAUTHENTICATED = 16

RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int_field(num: int, value: int) -> bytes:
    return _varint(num << 3) + _varint(value) if value else b""


def _bytes_field(num: int, value: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(value)) + value if value else b""


def retry_info(delay_s: float) -> bytes:
    """A serialized `google.rpc.RetryInfo` asking the client to wait `delay_s` seconds."""
    seconds = int(delay_s)
    duration = _int_field(1, seconds) + _int_field(2, int(round((delay_s - seconds) * 1e9)))
    return _varint(1 << 3 | 2) + _varint(len(duration)) + duration


def status_proto(code: int, message: str, retry_after_s: float | None = None) -> bytes:
    """A serialized `google.rpc.Status`; with `retry_after_s`, its details hold a RetryInfo."""
    out = _int_field(1, code) + _bytes_field(2, message.encode())
    if retry_after_s is not None:
        any_msg = _bytes_field(1, RETRY_INFO_TYPE.encode()) + _bytes_field(2, retry_info(retry_after_s))
        out += _varint(3 << 3 | 2) + _varint(len(any_msg)) + any_msg
    return out


def status_json(code: int, message: str, retry_after_s: float | None = None) -> bytes:
    """The same Status in proto3 JSON (a Duration is a string of seconds with an `s`)."""
    doc: dict = {"code": code, "message": message}
    if retry_after_s is not None:
        doc["details"] = [{"@type": RETRY_INFO_TYPE, "retryDelay": f"{retry_after_s:g}s"}]
    return orjson.dumps(doc)


def partial_success_proto(rejected_spans: int, message: str) -> bytes:
    """A serialized `ExportTraceServiceResponse` whose `partial_success` says `rejected_spans` were refused
    and why."""
    # imported on use: the OTLP protobuf classes 64 ms to import
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    return ExportTraceServiceResponse(
        partial_success={"rejected_spans": rejected_spans, "error_message": message}
    ).SerializeToString()


def partial_success_json(rejected_spans: int, message: str) -> bytes:
    """The same response in OTLP/JSON (int64 as a string, as proto3 JSON writes it)."""
    return orjson.dumps({"partialSuccess": {"rejectedSpans": str(rejected_spans), "errorMessage": message}})
