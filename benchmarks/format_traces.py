"""Trace files in each upstream server's span shapes, for the per-format benchmarks (bench_formats.py).

The shapes are tests/server_traces.py's writers (the conformance fixtures' shapes, each citing the upstream source
it follows), rendered for many drawn requests and exported as an SDK's batch span processor sends them (512 spans
an export, requests mixed as they overlap); the native format is budgetscope's own synthetic engine traces
(`budgetscope.synthetic`, the same as bench_collector.py and bench_report.py send, with its load generator's
client spans). The other formats have no client span: each file holds what the server exports.

    write(fmt, path, requests, start_ns) -> (spans, requests)
    to_protobuf(line) -> the same export as an OTLP protobuf ExportTraceServiceRequest
"""

from __future__ import annotations

import base64
import struct
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import server_traces as st  # the upstream shapes live beside the tests that check their adapters

FORMATS = {
    "native": None,
    "vllm_classic": st.vllm_classic,
    "vllm_journey": st.vllm_journey,
    "sglang_level3": lambda r, client: st.sglang(r, client, level=3),
    "tgi": st.tgi,
    "triton": st.triton,
}
"""Format name → writer of one request's OTLP/JSON documents (None: budgetscope.synthetic)."""

WINDOW = 2_000
"""Requests exported together (as_exported mixes the spans of the requests that overlap): bounded memory."""


def write(fmt: str, path: Path, requests: int, start_ns: int) -> tuple[int, int]:
    """Write `requests` requests of format `fmt` as OTLP JSON lines to `path`, the first arriving at `start_ns`;
    (spans, requests) written."""
    if fmt == "native":
        from budgetscope.synthetic import SyntheticSpec, write_jsonl

        spans = write_jsonl(
            path, SyntheticSpec(num_requests=requests, tiers=("interactive", "batch"), start_ns=start_ns)
        )
        return spans, requests
    writer = FORMATS[fmt]
    st.T0 = start_ns  # the writers place every time after server_traces.T0
    mix = st.draw(f"bench {fmt}", "queue", requests, failed_share=0.01)
    spans = 0
    with open(path, "wb") as f:
        for i in range(0, requests, WINDOW):
            docs = [d for r in mix.requests[i : i + WINDOW] for d in writer(r, False)]
            for doc in st.as_exported(docs, 512):
                spans += sum(len(ss["spans"]) for rs in doc["resourceSpans"] for ss in rs["scopeSpans"])
                f.write(orjson.dumps(doc) + b"\n")
    return spans, requests


def spans_per_request(fmt: str) -> float:
    """Spans a request of `fmt` takes, on average (from 200 drawn requests)."""
    if fmt == "native":
        return 7.0  # the synthetic engine's root and five stages, and its load generator's client span
    mix = st.draw(f"bench {fmt}", "queue", 200)
    docs = [d for r in mix.requests for d in FORMATS[fmt](r, False)]
    return sum(len(ss["spans"]) for d in docs for rs in d["resourceSpans"] for ss in rs["scopeSpans"]) / 200


# -- OTLP/JSON → OTLP protobuf, written field by field: protobuf's ParseDict took 18 s for 18 MB of journey spans


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _ld(field: int, data: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _fixed64(field: int, n: int) -> bytes:
    return _varint(field << 3 | 1) + struct.pack("<Q", n)


def _any(v: dict) -> bytes:
    if "stringValue" in v:
        return _ld(1, v["stringValue"].encode())
    if "boolValue" in v:
        return _varint(2 << 3) + _varint(int(v["boolValue"]))
    if "intValue" in v:
        return _varint(3 << 3) + _varint(int(v["intValue"]))
    if "doubleValue" in v:
        return _varint(4 << 3 | 1) + struct.pack("<d", float(v["doubleValue"]))
    if "arrayValue" in v:
        return _ld(5, b"".join(_ld(1, _any(x)) for x in v["arrayValue"].get("values", ())))
    if "kvlistValue" in v:
        return _ld(6, b"".join(_ld(1, _kv(x)) for x in v["kvlistValue"].get("values", ())))
    if "bytesValue" in v:
        return _ld(7, base64.b64decode(v["bytesValue"]))
    return b""


def _kv(kv: dict) -> bytes:
    return _ld(1, kv["key"].encode()) + _ld(2, _any(kv.get("value") or {}))


def _attrs(field: int, kvs) -> bytes:
    return b"".join(_ld(field, _kv(kv)) for kv in kvs or ())


def _span(s: dict) -> bytes:
    out = _ld(1, bytes.fromhex(s["traceId"])) + _ld(2, bytes.fromhex(s["spanId"]))
    if s.get("parentSpanId"):
        out += _ld(4, bytes.fromhex(s["parentSpanId"]))
    out += _ld(5, s.get("name", "").encode())
    if s.get("kind"):
        out += _varint(6 << 3) + _varint(int(s["kind"]))
    out += _fixed64(7, int(s["startTimeUnixNano"])) + _fixed64(8, int(s["endTimeUnixNano"]))
    out += _attrs(9, s.get("attributes"))
    for e in s.get("events") or ():
        out += _ld(
            11, _fixed64(1, int(e["timeUnixNano"])) + _ld(2, e["name"].encode()) + _attrs(3, e.get("attributes"))
        )
    status = s.get("status") or {}
    if status:
        out += _ld(
            15,
            (_ld(2, status["message"].encode()) if status.get("message") else b"")
            + (_varint(3 << 3) + _varint(int(status["code"])) if status.get("code") else b""),
        )
    return out


def to_protobuf(line: bytes) -> bytes:
    """One OTLP/JSON trace export (hex ids, as the writers above write them) as OTLP protobuf."""
    out = b""
    for rs in orjson.loads(line)["resourceSpans"]:
        body = _ld(1, _attrs(1, (rs.get("resource") or {}).get("attributes")))
        for ss in rs.get("scopeSpans", ()):
            scope = (ss.get("scope") or {}).get("name")
            body += _ld(
                2, (_ld(1, _ld(1, scope.encode())) if scope else b"") + b"".join(_ld(2, _span(x)) for x in ss["spans"])
            )
        out += _ld(1, body)
    return out
