"""Build OTLP trace exports in the exact wire formats (OTLP/JSON and protobuf), for tests.

Not a fake: these are the real encodings; the helpers only save typing.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json

_ids = itertools.count(1)

MS = 1_000_000
T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z


def trace_id() -> str:
    return f"{0x4BF92F3577B34DA6A3CE929D0E0E4736 + next(_ids):032x}"


def span_id() -> str:
    return f"{0x00F067AA0BA902B7 + next(_ids):016x}"


def any_value(v) -> dict:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list):
        return {"arrayValue": {"values": [any_value(x) for x in v]}}
    if isinstance(v, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": any_value(x)} for k, x in v.items()]}}
    if isinstance(v, bytes):
        import base64

        return {"bytesValue": base64.b64encode(v).decode()}
    return {"stringValue": v}


def attrs(d: dict) -> list[dict]:
    return [{"key": k, "value": any_value(v)} for k, v in d.items()]


def span(
    tid: str,
    sid: str,
    name: str,
    start: int,
    end: int,
    parent: str | None = None,
    kind: int = 1,
    attributes: dict | None = None,
    **extra,
) -> dict:
    s = {
        "traceId": tid,
        "spanId": sid,
        "name": name,
        "kind": kind,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": attrs(attributes or {}),
    }
    if parent:
        s["parentSpanId"] = parent
    s.update(extra)
    return s


def export(spans: list[dict], service: str = "engine", scope: str = "budgetscope") -> dict:
    """One ExportTraceServiceRequest in OTLP/JSON."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": attrs({"service.name": service})},
                "scopeSpans": [{"scope": {"name": scope}, "spans": spans}],
            }
        ]
    }


def to_proto(doc: dict) -> bytes:
    """An OTLP/JSON trace export (hex ids, as `export` builds) as the same protobuf ExportTraceServiceRequest."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    doc = copy.deepcopy(doc)
    for rs in doc.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for s in ss.get("spans", ()):
                for k in ("traceId", "spanId", "parentSpanId"):
                    if s.get(k):
                        s[k] = base64.b64encode(bytes.fromhex(s[k])).decode()
    return json_format.ParseDict(doc, ExportTraceServiceRequest()).SerializeToString()


def jsonl(*docs: dict) -> str:
    return "".join(json.dumps(d, separators=(",", ":")) + "\n" for d in docs)


def native_request(
    *,
    arrival: int = T0,
    stages=(("frontend", 2), ("queue", 10), ("prefill", 50), ("decode", 400), ("postprocess", 3)),
    tier: str = "interactive",
    output_tokens: int = 41,
    input_tokens: int = 100,
    client: tuple[float, float] | None = None,
    tenant: str | None = None,
    model: str = "m",
    extra_root: dict | None = None,
    itl: list[float] | None = None,
):
    """Spans of one native-contract request; stages are (stage, ms) in order, tiling [arrival, end].

    `client=(uplink_ms, downlink_ms)` adds a client span around the server root. Returns (tid, spans).
    """
    tid, root = trace_id(), span_id()
    t = arrival
    spans = []
    first_token = None
    for stage, ms in stages:
        end = t + int(ms * MS)
        a = {"budgetscope.stage": stage}
        if stage == "decode" and itl is not None:
            a["budgetscope.decode.itl_ms"] = itl
        spans.append(span(tid, span_id(), f"stage.{stage}", t, end, parent=root, attributes=a))
        if stage == "prefill":
            first_token = end
        t = end
    cid = span_id() if client else None
    ra = {
        "gen_ai.operation.name": "text_completion",
        "gen_ai.request.model": model,
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "gen_ai.usage.cache_read.input_tokens": 0,
        "budgetscope.tier": tier,
        "budgetscope.outcome": "ok",
    }
    if tenant:
        ra["budgetscope.tenant"] = tenant
    ra.update(extra_root or {})
    spans.insert(0, span(tid, root, "llm.request", arrival, t, parent=cid, kind=2, attributes=ra))
    if client:
        up, down = client
        sent = arrival - int(up * MS)
        spans.append(
            span(
                tid,
                cid,
                "llm.client.request",
                sent,
                t + int(down * MS),
                kind=3,
                attributes={
                    "budgetscope.client.scheduled_unix_nano": sent,
                    "budgetscope.client.first_token_unix_nano": first_token + int(down * MS),
                    "http.response.status_code": 200,
                    "gen_ai.usage.output_tokens": output_tokens,
                    "budgetscope.tier": tier,
                },
            )
        )
    return tid, spans


FAST_STAGES = (("frontend", 1), ("queue", 5), ("prefill", 20), ("decode", 50), ("postprocess", 1))
"""Stages (ms) of a request well within the sample budgets (TTFT 27 ms, E2E 77 ms)."""


def outcome_requests(outcomes: list[str], client: bool = True, stages=FAST_STAGES) -> list[dict]:
    """One export a native `interactive` request, 100 ms apart, each ending with its outcome (ok, error, ...)."""
    return [
        export(
            native_request(
                arrival=T0 + i * 100 * MS,
                client=(1, 1) if client else None,
                stages=stages,
                extra_root={"budgetscope.outcome": outcome},
            )[1]
        )
        for i, outcome in enumerate(outcomes)
    ]
