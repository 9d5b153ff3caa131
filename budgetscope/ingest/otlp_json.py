"""The reference decoder for OTLP/JSON trace exports (`ExportTraceServiceRequest` / `TracesData`).

Pure Python and complete: every AnyValue kind (string, bool, int, double, bytes, array, key/value list, nested
to any depth), int64 fields as strings or numbers, `kind`/`status` as enum numbers or names, hex or base64 ids.
The fast path (`budgetscope.ingest.jsonsql`) hands it every batch it cannot vouch for.
"""

from __future__ import annotations

import orjson

from budgetscope.ingest.spanbatch import BadBatch, SpanBatch
from budgetscope.schema import EVENTS_KEY

_EMPTY: dict = {}


def _array(v) -> list:
    return [any_value(x) for x in v.get("values", ())]


def _kvlist(v) -> dict:
    return attributes(v.get("values", ()))


def double(x) -> float | str:
    """A double attribute value. Non-finite values stay what proto3 JSON calls them ("NaN", "Infinity",
    "-Infinity"): JSON has no literal for them, and null would lose them."""
    v = float(x)
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    return v


_CONVERT = {
    "intValue": int,
    "doubleValue": double,
    "boolValue": bool,
    "arrayValue": _array,
    "kvlistValue": _kvlist,
    "bytesValue": str,  # already base64 text in OTLP/JSON
}


def any_value(v: dict):
    """One OTLP AnyValue as a plain Python value (an empty AnyValue is None). A field of a kind it does not
    know is skipped, as OTLP/JSON receivers must ("ignore message fields with unknown names"), and as the
    DuckDB path does: rejecting it here had made a batch land or not depending on which path took it."""
    for k, x in v.items():
        if k == "stringValue":
            return x
        convert = _CONVERT.get(k)
        if convert is not None:
            return convert(x)
    return None


def attributes(kvs) -> dict:
    """OTLP KeyValue list → dict. A KeyValue without a key is dropped, as the DuckDB path drops it (an attribute
    key must not be empty; this decoder had failed the whole batch with a KeyError: fuzz/targets.py otlpjson_diff)."""
    return {kv["key"]: any_value(kv.get("value") or _EMPTY) for kv in kvs if kv.get("key") is not None}


def _event_ns(x) -> int | None:
    """An event's timeUnixNano (decimal text or a number) as int ns, None when it is not one."""
    try:
        return int(x)
    except (TypeError, ValueError, OverflowError):
        return None


def _event(e) -> dict | None:
    """One OTLP/JSON span event as kept, None when it is not an object. Events were ignored before they were
    kept, so a malformed one still does not fail its batch: what cannot be read of it is left out."""
    if not isinstance(e, dict):
        return None
    kvs = e.get("attributes")
    try:
        attrs = attributes(kvs) if isinstance(kvs, list) else {}
    except (KeyError, TypeError, ValueError, AttributeError):
        attrs = {}
    name = e.get("name")
    return {
        "name": name if isinstance(name, str) else None,
        "time_unix_nano": _event_ns(e.get("timeUnixNano")),
        "attributes": attrs,
    }


def _with_events(attrs: dict, events) -> dict:
    """The span's attributes, with its OTLP/JSON events (if any) under `EVENTS_KEY`."""
    kept = [x for x in map(_event, events) if x is not None] if isinstance(events, list) else []
    if kept:
        attrs[EVENTS_KEY] = kept
    return attrs


def _service(kvs) -> str | None:
    """The string value of the first `service.name` attribute (None when it is not a string), as the DuckDB
    path and the C decoder take it. The attributes dict keeps the last value of a key written twice: taking
    service.name from it stored another service for the same span (found by fuzz/targets.py otlpjson_diff)."""
    for kv in kvs:
        if kv.get("key") == "service.name":
            v = (kv.get("value") or _EMPTY).get("stringValue")
            return v if isinstance(v, str) else None
    return None


def parse(raw: bytes):
    """orjson.loads with a one-line error."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if str(e).startswith("depth limit exceeded"):  # OTLP/JSON is 8 levels deep: this is no trace export
            raise BadBatch(f"not an OTLP trace export: JSON nested deeper than 1,024 levels ({e})") from None
        raise BadBatch(f"not JSON ({e})") from None


def decode(doc) -> SpanBatch:
    """Decode one parsed OTLP/JSON trace document; raise `BadBatch` if its structure is not OTLP."""
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
        what = f"keys {sorted(doc)[:5]}" if isinstance(doc, dict) else f"a JSON {type(doc).__name__}"
        raise BadBatch(f"not an OTLP trace export: no 'resourceSpans' list (found {what})")
    batch = SpanBatch()
    dumps = orjson.dumps
    try:
        for rs in _objects(doc["resourceSpans"], "resourceSpans"):
            res_kvs = (rs.get("resource") or _EMPTY).get("attributes", ())
            res = attributes(res_kvs)
            service = _service(res_kvs)
            res_json = dumps(res)
            for ss in _objects(rs.get("scopeSpans", ()), "scopeSpans"):
                scope = (ss.get("scope") or _EMPTY).get("name")
                for s in _objects(ss.get("spans", ()), "spans"):
                    status = (s.get("status") or _EMPTY).get("code")
                    batch.append(
                        s.get("traceId"),
                        s.get("spanId"),
                        s.get("parentSpanId"),
                        s.get("name"),
                        s.get("kind"),
                        s.get("startTimeUnixNano"),
                        s.get("endTimeUnixNano"),
                        service,
                        scope,
                        status,
                        dumps(_with_events(attributes(s.get("attributes", ())), s.get("events"))),
                        res_json,
                    )
    except BadBatch:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BadBatch(f"malformed OTLP JSON ({type(e).__name__}: {e})") from None
    return batch


def _objects(items, name: str):
    """The items of an OTLP list of messages; BadBatch (one line) if it is no list, or at the first item that
    is not a JSON object."""
    if not isinstance(items, (list, tuple)):
        raise BadBatch(f"not an OTLP trace export: {name} is a JSON {_json_kind(items)}, not an array")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadBatch(f"not an OTLP trace export: {name}[{i}] is a JSON {_json_kind(item)}, not an object")
        yield item


def _json_kind(value) -> str:
    kinds = {list: "array", dict: "object", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


def count_spans(raw) -> int:
    """Spans in an OTLP/JSON batch (bytes-like), counted on the bytes (each span has exactly one `"spanId"` key)."""
    return (raw if isinstance(raw, bytes) else bytes(raw)).count(b'"spanId"')
