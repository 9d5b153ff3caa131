"""The C decoder of OTLP protobuf (`otlp_fast.decode_proto`) against the reference path (`otlp_proto.decode`, then
the staging SQL): for every batch the C decoder takes, both store the same bytes in every column; every batch it
cannot vouch for, it leaves whole to the reference decoder, which lands it or rejects it as before."""

from __future__ import annotations

import base64
import math
import random
import struct

import pytest

from budgetscope.ingest import otlp_fast, otlp_proto
from budgetscope.ingest.staging import DECODED_COLUMNS
from conftest import rows
from decoded_rows import reference_rows, wire_edits
from otlp_wire import MS, T0, attrs, export, native_request, span, span_id, to_proto, trace_id

COLS = DECODED_COLUMNS


def test_the_extension_decodes_protobuf():
    assert otlp_fast.AVAILABLE, "budgetscope/ingest/_otlpjson.c was not compiled: `make setup` needs gcc"
    assert hasattr(otlp_fast._otlpjson, "decode_proto"), "the extension is older than its source: `make setup`"


# -- messages --------------------------------------------------------------------------------------------------


def one_span(**fields) -> dict:
    s = span(trace_id(), span_id(), "op", T0, T0 + MS, parent=span_id(), attributes={"k": "v"})
    s.update(fields)
    return export([s])


def pb_attrs(pairs) -> list[dict]:
    """KeyValues with the values given as OTLP/JSON AnyValue dicts."""
    return [{"key": k, "value": v} for k, v in pairs]


# hand-written wire format, for what the protobuf runtime would not write
def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field: int, wt: int) -> bytes:
    return varint(field << 3 | wt)


def ld(field: int, data: bytes) -> bytes:
    return tag(field, 2) + varint(len(data)) + data


def vi(field: int, n: int) -> bytes:
    return tag(field, 0) + varint(n)


def f64(field: int, n: int) -> bytes:
    return tag(field, 1) + struct.pack("<Q", n)


def raw_span(
    tid: bytes | None = None,
    sid: bytes | None = None,
    extra: bytes = b"",
    name: bytes = b"op",
    start: int = T0,
    end: int = T0 + MS,
    kind: int = 2,
) -> bytes:
    tid = bytes.fromhex(trace_id()) if tid is None else tid
    sid = bytes.fromhex(span_id()) if sid is None else sid
    return ld(1, tid) + ld(2, sid) + ld(5, name) + vi(6, kind) + f64(7, start) + f64(8, end) + extra


def raw_export(*spans: bytes, resource: bytes | None = None, scope: bytes = ld(1, b"sc")) -> bytes:
    res = ld(1, ld(1, b"service.name") + ld(2, ld(1, b"svc"))) if resource is None else resource
    ss = ld(1, scope) + b"".join(ld(2, s) for s in spans)
    return ld(1, ld(1, res) + ld(2, ss))


# -- the two paths ---------------------------------------------------------------------------------------------


def c_rows(payloads: list[bytes]):
    """(rows the C decoder wrote, ids of the batches it left)."""
    table, taken, left, _ = otlp_fast.decode_proto(payloads, list(range(1, len(payloads) + 1)))
    got = [] if table is None else [tuple(r[c] for c in COLS) for r in table.to_pylist()]
    assert taken == {b: sum(r[0] == b for r in got) for b in taken}
    assert sorted([*taken, *left]) == list(range(1, len(payloads) + 1))
    return sorted(got, key=repr), left


def assert_same(payloads: list[bytes]) -> list[int]:
    """The C decoder's rows equal the reference path's for every batch it takes; returns the ids it left."""
    c, left = c_rows(payloads)
    ref, bad = reference_rows(payloads, otlp_proto.decode)
    taken = set(range(1, len(payloads) + 1)) - set(left)
    assert not taken & set(bad), f"taken, but the reference rejects them: { {b: bad[b] for b in taken & set(bad)} }"
    assert c == [r for r in ref if r[0] in taken]
    return left


# -- what it takes: the same bytes as the reference path -------------------------------------------------------


def test_synthetic_traces_match_the_reference(tmp_path):
    import orjson

    from budgetscope.synthetic import SyntheticSpec, write_jsonl

    path = tmp_path / "t.jsonl"
    write_jsonl(path, SyntheticSpec(num_requests=400, tiers=("interactive", "batch"), spans_per_line=97))
    payloads = [to_proto(orjson.loads(line)) for line in path.read_bytes().splitlines()]
    assert len(payloads) > 20
    assert assert_same(payloads) == []


def test_native_requests_with_client_spans_match():
    docs = [export(native_request(client=(4, 2), tenant="t", itl=[1.0, 2.5])[1]) for _ in range(3)]
    docs.append(export(native_request()[1], service="engine-2", scope="other"))
    assert assert_same([to_proto(d) for d in docs]) == []


def test_every_value_kind_matches():
    a = attrs(
        {
            "s": "x",
            "b": True,
            "f": False,
            "i": 7,
            "neg": -12,
            "d": 1.5,
            "arr": [1, 2.5, "z", True, b"\x01"],
            "empty_arr": [],
            "raw": b"\x00\x01\xff",
            "one": b"a",
            "two": b"ab",
            "three": b"abc",
            "none": b"",
            "empty": "",
        }
    )
    a += pb_attrs(
        [
            ("nothing", {}),
            ("max", {"intValue": str(2**63 - 1)}),
            ("min", {"intValue": str(-(2**63))}),
            ("zero", {"intValue": "0"}),
            ("minus_one", {"intValue": "-1"}),
            ("arr_empty_el", {"arrayValue": {"values": [{}, {"intValue": "1"}, {"stringValue": ""}]}}),
        ]
    )
    a.append({"key": "novalue"})
    a.append({"key": "", "value": {"stringValue": "empty key"}})
    doc = one_span(attributes=a)
    doc["resourceSpans"][0]["resource"]["attributes"] += attrs({"host.arch": "amd64", "pid": 12, "ok": True})
    assert assert_same([to_proto(doc)]) == []


def test_strings_with_escapes_and_unicode_match():
    texts = [
        "tab\there",
        'q"uote',
        "back\\slash",
        "nl\nend",
        "\b\f\r",
        "\x01\x1f\x7f",
        "é ü 漢字",
        "\u2028\u2029",
        "😀 emoji",
        "a/b",
        "</script>",
        "\\u0041 literal",
        "\U0010ffff",
        "x" * 300 + "\n" + "é" * 40,
    ]
    a = pb_attrs((f"k{i}", {"stringValue": t}) for i, t in enumerate(texts))
    a += pb_attrs(
        [
            ('weird\tkey"', {"stringValue": "v"}),
            ("ключ 😀", {"stringValue": "значение"}),
            ("\x1f", {"arrayValue": {"values": [{"stringValue": t} for t in texts]}}),
        ]
    )
    doc = one_span(name='naïve "name"\n\t😀', attributes=a)
    doc["resourceSpans"][0]["scopeSpans"][0]["scope"]["name"] = "scope\\é\x01"
    doc["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"] = "svc\t😀\"'"
    assert assert_same([to_proto(doc)]) == []


def test_doubles_print_as_the_reference_prints_them():
    rng = random.Random(7)
    values = [
        0.1,
        1e300,
        -0.0,
        0.0,
        1.0,
        2.0,
        0.5,
        100.0,
        1e16,
        1e15,
        9.999999999999998e15,
        1e-5,
        1e-6,
        1.5e-7,
        1.7976931348623157e308,
        -1e-300,
        2.225073858507202e-308,
        1 / 3,
        2 / 3,
        123456789012345678.0,
        12345.678,
        0.000012345,
        1e21,
        1e22,
        1e23,
        5e-5,
        math.pi,
        -math.e,
        2.0**-20,
        2.0**49,
        9007199254740994.0,
    ]
    for _ in range(2000):  # any bits but subnormals and powers of two (left, see below)
        (v,) = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))
        if math.isfinite(v) and abs(v) >= 2.2250738585072014e-308 and math.frexp(abs(v))[0] != 0.5:
            values.append(v)
    for _ in range(2000):
        digits = rng.randint(1, 17)
        values.append(float(f"{rng.randrange(10 ** (digits - 1), 10**digits)}e{rng.randint(-30, 30)}"))
    a = pb_attrs((f"d{i}", {"doubleValue": v}) for i, v in enumerate(values))
    a += pb_attrs(
        [("nan", {"doubleValue": "NaN"}), ("inf", {"doubleValue": "Infinity"}), ("-inf", {"doubleValue": "-Infinity"})]
    )
    a.append({"key": "in_array", "value": {"arrayValue": {"values": [{"doubleValue": v} for v in values[:50]]}}})
    assert assert_same([to_proto(one_span(attributes=a))]) == []
    # one value a batch, as the reference decoder and orjson print them
    assert (
        assert_same([to_proto(one_span(attributes=pb_attrs([("d", {"doubleValue": v})]))) for v in values[:40]]) == []
    )


def test_short_decimals_print_as_the_reference_prints_them():
    """Doubles that a decimal of at most 15 significant digits reads back as (timestamps to the microsecond,
    round rates): the decoder finds their digits without printf; at the edges (15 and 16 digits, 10^15,
    ten to the -22nd and below, sums that are not the decimal they look like) it must agree all the same."""
    rng = random.Random(11)
    values = [80000.131758, 80000.1179, 1e15 - 1, 999999999999999.9, 1e15 + 2, 0.1 + 0.2, 1.1 * 1.1, 4.35, 0.3]
    values += [1e-22, 1.5e-22, 1.23e-23, 9.87654321e-20, 0.000001, 123456789012345.0, 12345678901234.5]
    for _ in range(3000):
        whole = rng.choice([0, 1, 7, 80_000, 1_700_000_000, 10 ** rng.randint(0, 14)])
        values.append(round(whole + rng.random(), rng.randint(0, 9)))
        digits = rng.randint(13, 16)
        values.append(float(f"{rng.randrange(10 ** (digits - 1), 10**digits)}e{rng.randint(-25, 5)}"))
    a = pb_attrs((f"d{i}", {"doubleValue": v if i % 2 else -v}) for i, v in enumerate(values))
    assert assert_same([to_proto(one_span(attributes=a))]) == []


def test_doubles_it_cannot_print_with_certainty_are_left():
    """Subnormals, and powers of two whose 15-digit form does not read back (their round-trip interval is
    lopsided); powers of two with a short exact form are taken."""
    left = assert_same(
        [
            to_proto(one_span(attributes=pb_attrs([("d", {"doubleValue": v})])))
            for v in (
                5e-324,
                2.0**-1030,
                2.0**1000,
                2.0**-900,
                2.0**60,
                2.0**53,
                2.0**-1022,
                2.0**40,
                0.25,
                1.0,
                2.0**-20,
            )
        ]
    )
    assert left == [1, 2, 3, 4, 5, 6, 7]


def test_kinds_and_statuses_match():
    docs = [
        one_span(kind=kind, status=status)
        for kind in (0, 1, 2, 3, 4, 5)
        for status in ({}, {"code": 0}, {"code": 1}, {"code": 2, "message": "boom"}, {"message": "only"})
    ]
    docs.append(one_span())
    del docs[-1]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["kind"]
    assert assert_same([to_proto(d) for d in docs]) == []


def test_optional_parts_and_fields_it_skips_match():
    s = span(
        trace_id(),
        span_id(),
        "op",
        T0,
        T0 + MS,
        traceState="k=v",
        flags=257,
        droppedAttributesCount=3,
        links=[
            {
                "traceId": base64.b64encode(b"\x01" * 16).decode(),
                "spanId": base64.b64encode(b"\x02" * 8).decode(),
                "traceState": "a=b",
                "attributes": attrs({"l": "x"}),
                "flags": 1,
            }
        ],
        droppedEventsCount=2,
        droppedLinksCount=4,
    )
    del s["name"]
    no_resource = {
        "resourceSpans": [
            {
                "scopeSpans": [{"spans": [span(trace_id(), span_id(), "a", T0, T0)]}],
                "schemaUrl": "https://opentelemetry.io/schemas/1.21.0",
            }
        ]
    }
    no_service = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": attrs({"x": "y"}),
                    "droppedAttributesCount": 2,
                    "entityRefs": [
                        {"type": "host", "idKeys": ["host.id"], "descriptionKeys": ["a", "b"], "schemaUrl": "u"}
                    ],
                },
                "scopeSpans": [
                    {
                        "scope": {
                            "name": "s",
                            "version": "1",
                            "attributes": attrs({"scope": {"k": [1]}}),
                            "droppedAttributesCount": 1,
                        },
                        "schemaUrl": "x",
                        "spans": [span(trace_id(), span_id(), "b", T0, T0 + 1)],
                    }
                ],
            }
        ]
    }
    empty_service = export([span(trace_id(), span_id(), "c", T0, T0 + 1)], service="", scope="")
    null_service = export([span(trace_id(), span_id(), "d", T0, T0 + 1)])
    null_service["resourceSpans"][0]["resource"]["attributes"] = [
        {"key": "service.name", "value": {}},
        {"key": "z", "value": {"intValue": "1"}},
    ]
    no_scope = {
        "resourceSpans": [
            {
                "resource": {},
                "scopeSpans": [
                    {"spans": [span(trace_id(), span_id(), "e", T0, T0 + 1)]},
                    {"scope": {}, "spans": []},
                    {},
                ],
            },
            {},
        ]
    }
    many = {
        "resourceSpans": [
            export(
                [span(trace_id(), span_id(), f"e{i}", T0, T0 + i) for i in range(1, 4)],
                service=f"svc{i}",
                scope=f"sc{i}",
            )["resourceSpans"][0]
            for i in range(3)
        ]
    }
    many["resourceSpans"][1]["scopeSpans"].append(
        {"scope": {"name": "another"}, "spans": [span(trace_id(), span_id(), "f", T0, T0 + 1)]}
    )
    only_empty = {"resourceSpans": [{}]}
    payloads = [
        to_proto(d)
        for d in (export([s]), no_resource, no_service, empty_service, null_service, no_scope, many, only_empty)
    ]
    assert assert_same(payloads) == []


def event(name="journey.QUEUED", time=T0 + 5, attributes=None, **extra) -> dict:
    e = {"timeUnixNano": str(time), "name": name, "attributes": attrs(attributes or {})}
    e.update(extra)
    return e


def raw_event(time: int | None = T0 + 5, name: bytes | None = b"ev", kvs: bytes = b"", extra: bytes = b"") -> bytes:
    """A Span.Event's wire bytes (field 11 of a span)."""
    body = (f64(1, time) if time is not None else b"") + (ld(2, name) if name is not None else b"") + kvs + extra
    return ld(11, body)


def test_spans_with_events_are_kept_as_the_reference_keeps_them():
    """Span events are kept under `budgetscope.events` in the attributes (name, time, attributes), as the
    reference decoder keeps them, after the span's own attributes."""
    import json

    ev = event(attributes={"event.type": "QUEUED", "x": [1, "two"]}, droppedAttributesCount=1)
    with_events = to_proto(export([span(trace_id(), span_id(), "op", T0, T0 + MS, attributes={"a": 1}, events=[ev])]))
    assert assert_same([to_proto(one_span()), with_events]) == []
    table, _, _, _ = otlp_fast.decode_proto([with_events], [1])
    assert json.loads(table.column("attributes")[0].as_py()) == {
        "a": 1,
        "budgetscope.events": [
            {
                "name": "journey.QUEUED",
                "time_unix_nano": T0 + 5,
                "attributes": {"event.type": "QUEUED", "x": [1, "two"]},
            }
        ],
    }


def test_event_values_times_and_names_match_the_reference():
    a = attrs(
        {
            "s": "x\t\x01é😀",
            "b": True,
            "i": -(2**63),
            "d": 80000.12345678912,
            "tiny": 1e-7,
            "arr": [1, 2.5, "z", False, b"\x01"],
            "raw": b"\x00\xff",
            "": "empty key",
        }
    )
    a += pb_attrs([("nothing", {}), ("inf", {"doubleValue": "-Infinity"}), ("nan", {"doubleValue": "NaN"})])
    a.append({"key": "novalue"})
    events = [
        event(attributes=None),
        event(name="", time=0),  # an empty name is null, a time 0 is 0, as the reference keeps them
        event(name='q"uote\n\x1f 漢字', time=2**64 - 1, attributes={"k": "v"}),
        {"name": "no time"},
        {},
        {"name": "all", "timeUnixNano": str(T0), "attributes": a, "droppedAttributesCount": 7},
        *(event(name=f"e{i}", time=T0 + i, attributes={"i": i, "half": i / 2}) for i in range(300)),
    ]
    doc = one_span(attributes=a, events=events, droppedEventsCount=2)
    plain = export([span(trace_id(), span_id(), "plain", T0, T0 + 1, attributes={"c": "\x01"})])
    assert assert_same([to_proto(doc), to_proto(plain)]) == []


def test_event_fields_in_any_order_match_the_reference():
    """Event fields in any order, events between and before the span's attributes, unknown fields in an event,
    an empty event message, a NUL-free name of every byte class."""
    kv = ld(3, ld(1, b"k") + ld(2, ld(1, b"v")))
    sp = raw_span(
        extra=raw_event(kvs=kv)
        + ld(9, ld(1, b"a") + ld(2, vi(3, 1)))
        + ld(11, kv + ld(2, b"late name") + vi(99, 5) + f64(1, 7) + vi(4, 3))
        + ld(11, b"")
        + ld(9, ld(1, b"b") + ld(2, ld(1, b"w")))
        + raw_event(time=None, name=None)
    )
    first = ld(1, bytes.fromhex(trace_id())) + raw_event(name="é\x7f".encode()) + raw_span()[18:]
    assert assert_same([raw_export(sp), raw_export(first), raw_export(raw_span(), raw_span(extra=raw_event()))]) == []


def test_vllm_journey_triton_and_tgi_exports_match_the_reference():
    from server_traces import as_exported, draw, tgi, triton, vllm_journey

    mix = draw("events", "queue", 40, failed_share=0.2)
    payloads = [
        to_proto(d)
        for write in (vllm_journey, triton, tgi)
        for d in as_exported([doc for r in mix.requests for doc in write(r, True)], 64)
    ]
    assert assert_same(payloads) == []


def test_fields_in_any_order_match():
    """Protobuf writers may put fields in any order: the resource after the scope spans, the scope after the
    spans, attributes between other span fields, the value of a KeyValue before its key, unknown fields."""
    sp = (
        ld(9, ld(2, ld(1, b"v1")) + ld(1, b"k1"))
        + f64(8, T0 + MS)
        + ld(2, bytes.fromhex(span_id()))
        + ld(9, ld(1, b"k2") + ld(2, vi(3, 5)))
        + vi(99, 1)
        + ld(1, bytes.fromhex(trace_id()))
        + f64(7, T0)
        + ld(5, b"late name")
        + ld(4, bytes.fromhex(span_id()))
        + tag(77, 5)
        + b"abcd"
        + f64(1000, 3)
    )
    res = ld(1, ld(1, b"service.name") + ld(2, ld(1, b"svc"))) + ld(1, ld(1, b"r") + ld(2, vi(2, 1)))
    ss = ld(2, sp) + ld(2, raw_span()) + ld(1, ld(2, b"v") + ld(1, b"scope after")) + ld(3, b"url")
    rs = ld(2, ss) + ld(3, b"url") + ld(2, ld(2, raw_span())) + ld(1, res) + ld(50, b"unknown")
    msg = ld(1, rs) + ld(15, b"unknown at the top") + ld(1, ld(2, ld(2, raw_span())))
    assert assert_same([msg]) == []


def test_many_attributes_and_large_batches_match():
    """More keys than the decoder compares one by one (it then hashes them), and columns that outgrow their
    first size."""
    many = attrs({f"key.{i}": i * 0.5 if i % 3 else f"v{i}" for i in range(300)})
    doc = export(
        [span(trace_id(), span_id(), f"s{i}", T0, T0 + i, parent=span_id(), attributes={"i": i}) for i in range(3000)]
        + [span(trace_id(), span_id(), "many", T0, T0 + 1)]
    )
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][-1]["attributes"] = many
    doc["resourceSpans"][0]["resource"]["attributes"] += attrs({f"r{i}": "x" * 40 for i in range(25)})
    assert assert_same([to_proto(doc)]) == []


def test_several_batches_in_one_call():
    good = [to_proto(export(native_request()[1])) for _ in range(4)]
    bad = to_proto(one_span(attributes=pb_attrs([("m", {"kvlistValue": {"values": []}})])))
    c, left = c_rows([good[0], bad, good[1], b"", good[2], good[3][:-3], good[3]])
    assert left == [2, 4, 6]
    assert sorted({r[0] for r in c}) == [1, 3, 5, 7] and len(c) == 24
    assert assert_same([good[0], bad, good[1], b"", good[2], good[3][:-3], good[3]]) == [2, 4, 6]


def test_random_attributes_match():
    rng = random.Random(11)
    alphabet = 'ab"\\/\n\t\x01\x1f\x7fé漢😀\u2028 '

    def text():
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))

    def value(depth=0):
        kind = rng.randrange(8 if depth == 0 else 7)
        if kind == 0:
            return {"stringValue": text()}
        if kind == 1:
            return {"boolValue": rng.random() < 0.5}
        if kind == 2:
            return {"intValue": str(rng.choice([rng.randint(-(2**63), 2**63 - 1), rng.randint(-1000, 1000)]))}
        if kind == 3:
            return {
                "doubleValue": rng.choice(
                    [rng.uniform(-1e6, 1e6), rng.random(), round(rng.random(), 3), rng.randint(-5, 5) * 1.0]
                )
            }
        if kind == 4:
            return {"bytesValue": base64.b64encode(rng.randbytes(rng.randint(0, 9))).decode()}
        if kind in (5, 6):
            return {}
        return {"arrayValue": {"values": [value(1) for _ in range(rng.randint(0, 4))]}}

    payloads = []
    for _ in range(60):
        spans = []
        for _ in range(rng.randint(1, 5)):
            keys = list(dict.fromkeys(text() for _ in range(rng.randint(0, 12))))
            spans.append(
                span(
                    trace_id(),
                    span_id(),
                    text(),
                    T0,
                    T0 + rng.randint(0, 10**9),
                    kind=rng.randint(0, 5),
                    parent=span_id() if rng.random() < 0.7 else None,
                    attributes=None,
                    status={"code": rng.randint(0, 2)},
                )
            )
            spans[-1]["attributes"] = pb_attrs((k, value()) for k in keys)
        doc = export(spans, service=text(), scope=text())
        doc["resourceSpans"][0]["resource"]["attributes"] += pb_attrs((f"r.{text()}", value()) for _ in range(3))
        payloads.append(to_proto(doc))
    left = assert_same(payloads)
    assert len(left) < 10  # a duplicate resource key now and then


def test_mutated_messages_are_taken_only_when_the_reference_agrees():
    """Random bytes flipped, cut or inserted: whatever the C decoder still takes, the reference decodes to the
    same rows."""
    base = [
        to_proto(export(native_request(client=(1, 1), itl=[1.5])[1])),
        to_proto(one_span(attributes=attrs({"a": [1, "x"], "b": 2.5, "c": b"\x00"}))),
    ]
    payloads = wire_edits(base, 600, 3)
    left = assert_same(payloads)
    assert 0 < len(left) < len(payloads)  # some are still good messages; most are not


def test_mutated_messages_with_events_are_taken_only_when_the_reference_agrees():
    from server_traces import draw, vllm_journey

    base = [to_proto(d) for d in vllm_journey(draw("m", "queue", 1).requests[0], True)[:2]]
    payloads = wire_edits(base, 400, 4)
    left = assert_same(payloads)
    assert 20 < len(payloads) - len(left) and left


# -- what it leaves, whole -------------------------------------------------------------------------------------


def _bad_case(case: str) -> bytes:
    tid, sid = bytes.fromhex(trace_id()), bytes.fromhex(span_id())
    if case == "empty message":
        return b""
    if case == "garbage":
        return b"\xff\xfe not a protobuf message \x00\x01"
    if case == "truncated":
        return raw_export(raw_span())[:-5]
    if case == "only unknown fields":
        return ld(2, b"x") + vi(3, 1)
    if case == "no spans, a group":
        return raw_export(raw_span(extra=tag(20, 3) + tag(20, 4)))
    if case == "wire type 7":
        return raw_export(raw_span(extra=tag(20, 7)))
    if case == "known field, other wire type":
        return raw_export(raw_span(extra=vi(5, 1)))
    if case == "overlong varint":
        return raw_export(raw_span(extra=tag(6, 0) + b"\xff" * 10 + b"\x01"))
    if case == "length past the end":
        return raw_export(raw_span(extra=tag(3, 2) + varint(1000)))
    if case == "field number 0":
        return raw_export(raw_span(extra=b"\x02\x00"))
    if case == "nested array":
        return to_proto(one_span(attributes=attrs({"m": [1, [2]]})))
    if case == "kvlist":
        return to_proto(one_span(attributes=attrs({"m": {"k": 1}})))
    if case == "string table index":
        return raw_export(raw_span(extra=ld(9, ld(1, b"k") + ld(2, vi(8, 3)))))
    if case == "two values in one":
        return raw_export(raw_span(extra=ld(9, ld(1, b"k") + ld(2, ld(1, b"a") + vi(3, 1)))))
    if case == "duplicate attribute key":
        return to_proto(one_span(attributes=pb_attrs([("k", {"intValue": "1"}), ("x", {}), ("k", {"intValue": "2"})])))
    if case == "duplicate resource key":
        return raw_export(raw_span(), resource=ld(1, ld(1, b"a") + ld(2, vi(3, 1))) + ld(1, ld(1, b"a")))
    if case == "trace id twice":
        return raw_export(raw_span(extra=ld(1, tid)))
    if case == "name twice":
        return raw_export(raw_span(extra=ld(5, b"again")))
    if case == "status twice":
        return raw_export(raw_span(extra=ld(15, vi(3, 1)) + ld(15, ld(2, b"m"))))
    if case == "resource twice":
        return ld(1, ld(1, ld(1, ld(1, b"a"))) + ld(1, ld(1, ld(1, b"b"))) + ld(2, ld(2, raw_span())))
    if case == "scope twice":
        return ld(1, ld(2, ld(1, ld(1, b"a")) + ld(1, ld(2, b"v")) + ld(2, raw_span())))
    if case == "no trace id":
        return raw_export(raw_span(tid=b""))
    if case == "15-byte trace id":
        return raw_export(raw_span(tid=tid[:15]))
    if case == "4-byte span id":
        return raw_export(raw_span(sid=sid[:4]))
    if case == "3-byte parent id":
        return raw_export(raw_span(extra=ld(4, b"abc")))
    if case == "no start":
        return raw_export(raw_span(start=0))
    if case == "ends before it starts":
        return raw_export(raw_span(start=T0 + 5, end=T0))
    if case == "time past int64":
        return raw_export(raw_span(end=2**63 + 5))
    if case == "kind 7":
        return raw_export(raw_span(kind=7))
    if case == "status code 3":
        return raw_export(raw_span(extra=ld(15, vi(3, 3))))
    if case == "bool 2":
        return raw_export(raw_span(extra=ld(9, ld(1, b"k") + ld(2, vi(2, 2)))))
    if case == "invalid UTF-8 name":
        return raw_export(raw_span(name=b"\xc3\x28"))
    if case == "surrogate in a value":
        return raw_export(raw_span(extra=ld(9, ld(1, b"k") + ld(2, ld(1, b"\xed\xa0\x80")))))
    if case == "invalid UTF-8 in an event":
        return raw_export(raw_span(extra=ld(11, ld(2, b"\xff"))))
    if case == "invalid UTF-8 in a link's trace state":
        return raw_export(raw_span(extra=ld(13, ld(3, b"\xc0\x80"))))
    if case == "NUL in the name":
        return raw_export(raw_span(name=b"a\x00b"))
    if case == "NUL in a value":
        return raw_export(raw_span(extra=ld(9, ld(1, b"k") + ld(2, ld(1, b"a\x00")))))
    if case == "int service.name":
        return raw_export(raw_span(), resource=ld(1, ld(1, b"service.name") + ld(2, vi(3, 5))))
    if case == "subnormal double":
        return raw_export(raw_span(extra=ld(9, ld(1, b"k") + ld(2, f64(4, 1)))))
    if case == "kvlist in an event":
        return raw_export(raw_span(extra=raw_event(kvs=ld(3, ld(1, b"k") + ld(2, ld(6, b""))))))
    if case == "nested array in an event":
        return raw_export(raw_span(extra=raw_event(kvs=ld(3, ld(1, b"k") + ld(2, ld(5, ld(1, ld(5, b""))))))))
    if case == "event time twice":
        return raw_export(raw_span(extra=raw_event(extra=f64(1, 5))))
    if case == "event name twice":
        return raw_export(raw_span(extra=raw_event(extra=ld(2, b"again"))))
    if case == "event time of another wire type":
        return raw_export(raw_span(extra=ld(11, vi(1, 5))))
    if case == "event of another wire type":
        return raw_export(raw_span(extra=vi(11, 1)))
    if case == "key twice in an event":
        kv = ld(3, ld(1, b"k") + ld(2, vi(3, 1)))
        return raw_export(raw_span(extra=raw_event(kvs=kv + ld(3, ld(1, b"x")) + kv)))
    if case == "NUL in an event name":
        return raw_export(raw_span(extra=raw_event(name=b"a\x00")))
    if case == "NUL in an event value":
        return raw_export(raw_span(extra=raw_event(kvs=ld(3, ld(1, b"k") + ld(2, ld(1, b"\x00"))))))
    if case == "attribute named budgetscope.events":
        return raw_export(raw_span(extra=ld(9, ld(1, b"budgetscope.events")) + raw_event()))
    if case == "truncated event":
        return raw_export(raw_span(extra=ld(11, f64(1, 5)[:-2])))
    if case == "deeply nested event":
        deep = ld(1, b"")
        for _ in range(40):
            deep = ld(5, ld(1, deep))  # AnyValue.array_value.values[0]
        return raw_export(raw_span(extra=ld(11, ld(3, ld(1, b"k") + ld(2, deep)))))
    raise AssertionError(case)


BAD_CASES = [
    "empty message",
    "garbage",
    "truncated",
    "only unknown fields",
    "no spans, a group",
    "wire type 7",
    "known field, other wire type",
    "overlong varint",
    "length past the end",
    "field number 0",
    "nested array",
    "kvlist",
    "string table index",
    "two values in one",
    "duplicate attribute key",
    "duplicate resource key",
    "trace id twice",
    "name twice",
    "status twice",
    "resource twice",
    "scope twice",
    "no trace id",
    "15-byte trace id",
    "4-byte span id",
    "3-byte parent id",
    "no start",
    "ends before it starts",
    "time past int64",
    "kind 7",
    "status code 3",
    "bool 2",
    "invalid UTF-8 name",
    "surrogate in a value",
    "invalid UTF-8 in an event",
    "invalid UTF-8 in a link's trace state",
    "NUL in the name",
    "NUL in a value",
    "int service.name",
    "subnormal double",
    "deeply nested event",
    "kvlist in an event",
    "nested array in an event",
    "event time twice",
    "event name twice",
    "event time of another wire type",
    "event of another wire type",
    "key twice in an event",
    "NUL in an event name",
    "NUL in an event value",
    "attribute named budgetscope.events",
    "truncated event",
]


@pytest.mark.parametrize("case", BAD_CASES)
def test_batches_it_cannot_vouch_for_are_left_whole(case):
    good = to_proto(export(native_request()[1]))
    c, left = c_rows([good, _bad_case(case), to_proto(export(native_request()[1], service="other"))])
    assert left == [2]
    assert {r[0] for r in c} == {1, 3} and len(c) == 12


def test_the_schema_is_the_installed_one():
    """The decoder checks the fields it skips against its own table of the OTLP messages: it must know every
    field the installed opentelemetry-proto knows, with the same wire form."""
    from google.protobuf.descriptor import FieldDescriptor as F
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    wire = {
        F.TYPE_STRING: "string",
        F.TYPE_BYTES: "bytes",
        F.TYPE_FIXED64: "fixed64",
        F.TYPE_DOUBLE: "fixed64",
        F.TYPE_SFIXED64: "fixed64",
        F.TYPE_FIXED32: "fixed32",
        F.TYPE_FLOAT: "fixed32",
        F.TYPE_SFIXED32: "fixed32",
    }
    want: dict[str, dict[int, str]] = {}

    def walk(d):
        if d.full_name in want:
            return
        want[d.full_name] = {
            f.number: f.message_type.full_name if f.message_type else wire.get(f.type, "varint") for f in d.fields
        }
        for f in d.fields:
            if f.message_type:
                walk(f.message_type)

    walk(ExportTraceServiceRequest.DESCRIPTOR)
    assert otlp_fast._otlpjson.proto_schema() == want


def test_spans_join_the_same_span_set_as_json():
    """A protobuf batch repeating a span a JSON batch of the same ingest call decoded is reported repeated."""
    import json

    spans = native_request()[1]
    seen = otlp_fast.span_set()
    _, taken, _, first = otlp_fast.decode([json.dumps(export(spans)).encode()], [1], seen)
    assert taken == {1: 6} and not first
    _, taken, _, other = otlp_fast.decode_proto([to_proto(export(native_request()[1]))], [2], seen)
    assert taken == {2: 6} and not other
    _, taken, _, again = otlp_fast.decode_proto([to_proto(export(spans[3:4]))], [3], seen)
    assert taken == {3: 1} and again


# -- through the archive ---------------------------------------------------------------------------------------


def _ingest(path, batches, monkeypatch, available: bool, taken: dict | None = None):
    """Ingest `batches` into a new archive with the C decoders on or off: (spans, ingest_batches, rejected,
    counts, requests). `taken` collects the protobuf batches the C decoder took."""
    from budgetscope.opener import Archive

    monkeypatch.setattr(otlp_fast, "AVAILABLE", available)
    real = otlp_fast.decode_proto

    def spy(payloads, batch_ids, seen=None):
        out = real(payloads, batch_ids, seen)
        if taken is not None:
            taken.update(out[1])
        return out

    monkeypatch.setattr(otlp_fast, "decode_proto", spy)
    with Archive(path) as a:
        rep = a.ingest(batches)
    query = (
        "SELECT trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, service_name, scope_name, "
        "status_code, CAST(attributes AS VARCHAR), CAST(resource AS VARCHAR), source, batch_id "
        "FROM spans ORDER BY batch_id, span_id"
    )
    return (
        rows(path, query),
        rows(
            path,
            "SELECT batch_id, format, span_count, spans_inserted, duplicate_spans FROM ingest_batches "
            "ORDER BY batch_id",
        ),
        [(r.position, r.error) for r in rep.rejected],
        (rep.spans, rep.spans_inserted, rep.duplicate_spans, rep.batches_landed),
        rows(path, "SELECT * FROM requests ORDER BY trace_id"),
    )


def _mixed_batches(one_per_chunk: bool):
    """Batches each path takes, copies of spans within and across formats, bad batches and bail cases.

    Within one chunk, the fast paths land before the reference decoder: a copy they take wins over an earlier
    batch's the reference decodes (as with OTLP/JSON). So a JSON copy of a protobuf span comes only when each
    batch is its own chunk: without the C decoder, the copy would win."""
    import json

    from budgetscope.archive.spool import RawBatch

    _, a = native_request(client=(3, 1))
    _, b = native_request(itl=[1.0, 2.0])
    _, c = native_request(tenant="t")
    good = [("proto", to_proto(export(a))), ("json", json.dumps(export(b)).encode()), ("proto", to_proto(export(c)))]
    cases = [
        ("proto", _bad_case(k))
        for k in (
            "truncated",
            "garbage",
            "kvlist",
            "duplicate attribute key",
            "ends before it starts",
            "no trace id",
            "15-byte trace id",
            "3-byte parent id",
            "empty message",
            "time past int64",
            "subnormal double",
            "name twice",
            "only unknown fields",
        )
    ]
    copies = [
        ("proto", to_proto(export(a[:2], service="again"))),  # copies of proto spans landed by C
        ("proto", to_proto(export(b[1:3], service="again"))),  # copies of JSON spans, as protobuf
        ("proto", to_proto(export([a[5], dict(a[5])]))),
    ]  # a copy within one batch
    if one_per_chunk:
        copies.append(("json", json.dumps(export(c[4:5], service="again")).encode()))  # proto spans, as JSON
    later = [("proto", to_proto(export(native_request()[1], service="late")))]
    fmt = {"proto": "otlp-proto", "json": "otlp-json"}
    return [RawBatch(p, fmt[f], "test", f"batch {i}") for i, (f, p) in enumerate(good + cases + copies + later, 1)]


@pytest.mark.parametrize("one_per_chunk", [False, True])
@pytest.mark.parametrize("suffix", ["", ".duckdb"])
def test_archive_holds_the_same_rows_with_and_without_the_c_decoder(tmp_path, monkeypatch, one_per_chunk, suffix):
    from budgetscope.ingest import batches

    if one_per_chunk:  # every batch its own chunk, as in a stream larger than a chunk
        monkeypatch.setattr(batches, "CHUNK_BYTES", 1)
    mixed = _mixed_batches(one_per_chunk)
    taken: dict[int, int] = {}
    results = [
        _ingest(tmp_path / f"{available}{suffix}", mixed, monkeypatch, available, taken) for available in (True, False)
    ]
    assert results[0] == results[1]
    # the good ones and the copies, by the C decoder; the batches it cannot vouch for, by the reference
    proto = [i for i, b in enumerate(mixed, 1) if b.format == "otlp-proto"]
    assert sorted(taken) == [1, 3, 17, 18, 19, len(mixed)] and set(taken) <= set(proto)
    spans, ingest_batches, rejected, counts, requests = results[0]
    errors = dict(rejected)
    assert "ends before it starts" in errors["batch 8"] and "has no traceId" in errors["batch 9"]
    assert errors["batch 4"].startswith("not an OTLP protobuf trace export")
    assert counts[1] + counts[2] == counts[0] and counts[2] == 6 + one_per_chunk
    assert requests


def test_archive_with_events_holds_the_same_rows_with_and_without_the_c_decoder(tmp_path, monkeypatch):
    """vLLM journey, Triton and TGI exports in protobuf (events), with an events message the C decoder leaves,
    a bad one and copies: the same archive with the extension on and off, the server exports taken by C."""
    from budgetscope.archive.spool import RawBatch
    from server_traces import as_exported, draw, tgi, triton, vllm_journey

    mix = draw("archive events", "queue", 12, failed_share=0.25)
    docs = [
        d for w in (vllm_journey, triton, tgi) for d in as_exported([x for r in mix.requests for x in w(r, True)], 16)
    ]
    payloads = [to_proto(d) for d in docs]
    payloads += [
        _bad_case("kvlist in an event"),
        raw_export(raw_span(start=T0 + 5, end=T0, extra=raw_event())),
        payloads[0],
    ]
    pbs = [RawBatch(p, "otlp-proto", "t", f"message {i}") for i, p in enumerate(payloads, 1)]
    taken: dict[int, int] = {}
    results = [_ingest(tmp_path / str(available), pbs, monkeypatch, available, taken) for available in (True, False)]
    spans, _, rejected, counts, _ = results[0]
    assert results[0][:4] == results[1][:4]
    assert [[repr(v) for v in r] for r in results[0][4]] == [[repr(v) for v in r] for r in results[1][4]]  # NaN
    assert len(rejected) == 1 and "ends before it starts" in rejected[0][1]
    assert len(results[0][4]) == 3 * 12 and sum('"budgetscope.events"' in r[10] for r in spans) > 3 * 12
    assert set(range(1, len(docs) + 1)) <= set(taken) and len(docs) + 1 not in taken


@pytest.mark.parametrize("limit", [None, 3])
def test_copies_across_chunks_of_one_call_are_found(tmp_path, monkeypatch, limit):
    """Protobuf batches only, each its own chunk, all taken by the C decoder: the span set skips the look for
    copies while no pair repeats; a full set (limit 3) looks always."""
    from budgetscope.archive.spool import RawBatch
    from budgetscope.ingest import batches

    monkeypatch.setattr(batches, "CHUNK_BYTES", 1)
    if limit:
        real = otlp_fast.span_set
        monkeypatch.setattr(otlp_fast, "span_set", lambda: real(limit))
    _, a = native_request()
    _, b = native_request()
    docs = [export(a), export(b), export(a[2:4], service="again"), export(b[:1])]
    pbs = [RawBatch(to_proto(d), "otlp-proto", "t", f"message {i}") for i, d in enumerate(docs, 1)]
    taken: dict[int, int] = {}
    results = [_ingest(tmp_path / str(available), pbs, monkeypatch, available, taken) for available in (True, False)]
    assert results[0] == results[1] and taken == {1: 6, 2: 6, 3: 2, 4: 1}
    assert results[0][3] == (15, 12, 3, 4)
    assert [r[2:] for r in results[0][1]] == [(6, 6, 0), (6, 6, 0), (2, 0, 2), (1, 0, 1)]


def test_a_chunk_mixing_formats_keeps_expected_and_c_only():
    import json

    from budgetscope.archive.spool import RawBatch
    from budgetscope.ingest.batches import chunk

    seen = otlp_fast.span_set()
    pb = RawBatch(to_proto(export(native_request()[1])), "otlp-proto", "t", "1")
    js = RawBatch(json.dumps(export(native_request()[1])).encode(), "otlp-json", "t", "2")
    ch = chunk([(10, "h1", pb), (11, "h2", js)], 2, [], seen)
    assert ch.expected == {10: 6, 11: 6} and ch.c_only and not ch.repeated and ch.raw_json is None
    assert ch.decoded.num_rows == 12 and sorted(set(ch.decoded.column("batch_id").to_pylist())) == [10, 11]
    left = RawBatch(_bad_case("kvlist"), "otlp-proto", "t", "3")
    ch = chunk([(12, "h3", left), (13, "h4", pb)], 2, [], seen)
    assert ch.expected == {13: 6} and not ch.c_only and ch.repeated
