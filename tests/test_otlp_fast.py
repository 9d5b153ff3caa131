"""The C decoder of OTLP/JSON (`otlp_fast`) against the DuckDB path (`jsonsql`): for every batch the C decoder
takes, both store the same bytes in every column; every batch it cannot vouch for, it leaves whole."""

from __future__ import annotations

import json
import random

import pytest

from budgetscope.ingest import jsonsql, otlp_fast, otlp_json, staging
from budgetscope.ingest.staging import DECODED_COLUMNS
from conftest import rows
from decoded_rows import json_edits, reference_rows
from otlp_wire import MS, T0, attrs, export, jsonl, native_request, span, span_id, trace_id

COLS = DECODED_COLUMNS


def test_the_extension_is_built():
    """Without a C compiler at install time the package still works, through the slower path; this says so."""
    assert otlp_fast.AVAILABLE, "budgetscope/ingest/_otlpjson.c was not compiled: `make setup` needs gcc"


def c_rows(payloads: list[bytes]):
    """(rows the C decoder wrote, ids of the batches it left)."""
    table, taken, left, _ = otlp_fast.decode(payloads, list(range(1, len(payloads) + 1)))
    got = [] if table is None else [tuple(r[c] for c in COLS) for r in table.to_pylist()]
    assert taken == {b: n for b, n in ((b, sum(r[0] == b for r in got)) for b in taken)}
    return sorted(got), left


def duckdb_rows(payloads: list[bytes]):
    """(rows the DuckDB path flattens and normalises without error, ids of batches it would not take)."""
    import duckdb
    import pyarrow as pa

    con = duckdb.connect()
    staging.setup(con)
    jsonsql.setup(con)
    con.register(
        "bs_raw",
        pa.table(
            {"batch_id": list(range(1, len(payloads) + 1)), "doc": [p.decode("utf-8", "replace") for p in payloads]}
        ),
    )
    flat = staging.normalise(
        "(" + jsonsql._FLATTEN.replace("@RAW@", "bs_raw").replace("@WHERE@", "WHERE json_valid(doc)") + ")"
    )
    got = con.execute(f"SELECT {', '.join(COLS)}, err FROM ({flat})").fetchall()
    bad = {r[0] for r in got if r[-1] is not None or "\\u0000" in (r[11] + r[12])}
    counts: dict[int, int] = {}
    for r in got:
        counts[r[0]] = counts.get(r[0], 0) + 1
    bad |= {b for b, p in enumerate(payloads, 1) if counts.get(b, 0) != otlp_json.count_spans(p)}
    return sorted(r[:-1] for r in got if r[0] not in bad), bad


def dumps(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def one_span_doc(**fields) -> dict:
    s = span(trace_id(), span_id(), "op", T0, T0 + MS)
    s.update(fields)
    return export([s])


def assert_same(payloads: list[bytes]) -> list[int]:
    """The C decoder's rows equal the DuckDB path's for every batch it takes; returns the ids it left."""
    c, left = c_rows(payloads)
    d, _ = duckdb_rows(payloads)
    taken = {r[0] for r in c}
    assert c == [r for r in d if r[0] in taken]
    return left


# -- what it takes: the same bytes as the DuckDB path ----------------------------------------------------------


def test_native_requests_with_client_spans_match_the_duckdb_path():
    docs = [export(native_request(client=(4, 2), tenant="t", itl=[1.0, 2.5])[1]) for _ in range(3)]
    docs.append(export(native_request()[1], service="engine-2", scope="other"))
    assert assert_same([dumps(d) for d in docs]) == []


def test_every_scalar_kind_and_int_forms_match():
    a = attrs(
        {
            "s": "x",
            "b": True,
            "f": False,
            "i": 7,
            "neg": -12,
            "d": 1.5,
            "arr": [1, 2.5, "z", True],
            "empty_arr": [],
            "raw": b"\x00\x01\xff",
        }
    )
    a += [
        {"key": "empty", "value": {}},
        {"key": "novalue"},
        {"key": "zeros", "value": {"intValue": "007"}},
        {"key": "negzero", "value": {"intValue": "-0"}},
        {"key": "asnumber", "value": {"intValue": 42}},
        {"key": "big", "value": {"intValue": "-9223372036854775808"}},
        {"key": "dint", "value": {"doubleValue": 3}},
        {"key": "dexp", "value": {"doubleValue": 1.25e-3}},
        {"key": "dup", "value": {"stringValue": "first"}},
        {"key": "dup", "value": {"stringValue": "second"}},
        {"key": "arr_empty_el", "value": {"arrayValue": {"values": [{}, {"intValue": "1"}]}}},
    ]
    doc = one_span_doc(attributes=a)
    doc["resourceSpans"][0]["resource"]["attributes"] += attrs({"host.arch": "amd64", "pid": 12})
    assert assert_same([dumps(doc)]) == []


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
    ]
    a = [{"key": f"k{i}", "value": {"stringValue": t}} for i, t in enumerate(texts)]
    a.append({"key": 'weird\tkey"', "value": {"stringValue": "v"}})
    doc = one_span_doc(name='naïve "name"\n', attributes=a)
    doc["resourceSpans"][0]["scopeSpans"][0]["scope"]["name"] = "scope\\é"
    doc["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"] = "svc\t😀"
    # both the escaped (ASCII) and the raw UTF-8 forms of the same text
    assert assert_same([dumps(doc), json.dumps(doc).encode()]) == []
    # \u escapes written by hand, a surrogate pair among them
    raw = dumps(one_span_doc(attributes=[{"key": "u", "value": {"stringValue": "PLACEHOLDER"}}]))
    raw = raw.replace(b"PLACEHOLDER", b"\\u00e9\\u0041\\ud83d\\ude00\\/\\u001f")
    assert assert_same([raw]) == []


def test_doubles_print_as_duckdb_prints_them():
    rng = random.Random(7)
    values = [
        0.1,
        100.0,
        2.5,
        -0.0,
        0.0,
        1e-6,
        1.5e-6,
        9.99e20,
        1e20,
        123456789012345.0,
        0.000001234,
        1 / 4,
        12345678.9,
        -3.75,
        1e21,
        1e-7,
        1 / 3,
    ]
    for _ in range(300):
        digits = rng.randint(1, 17)
        mant = rng.randrange(10 ** (digits - 1), 10**digits)
        values.append(float(f"{'-' if rng.random() < 0.3 else ''}{mant}e{rng.randint(-12 - digits, 22 - digits)}"))
    # one batch a value (json writes Python's shortest repr: 1.5e-06, 1e+20, ...), then the same values written
    # other ways producers write them: exponents, trailing zeros, upper-case E
    payloads = [dumps(one_span_doc(attributes=[{"key": "d", "value": {"doubleValue": v}}])) for v in values]
    texts = ["1E3", "1.500", "0.0e0", "-2.50e-2", "120e-1", "0.00012e2", "5", "-0"]
    for t in texts:
        payloads.append(
            dumps(one_span_doc(attributes=[{"key": "d", "value": {"doubleValue": 8}}])).replace(
                b'"doubleValue":8', b'"doubleValue":' + t.encode()
            )
        )
    left = assert_same(payloads)
    plain = [
        v == 0 or (1e-6 <= abs(v) < 1e21 and len(repr(abs(v)).replace(".", "").split("e")[0].strip("0")) <= 15)
        for v in values
    ] + [True] * len(texts)
    assert left == [i for i, ok in enumerate(plain, 1) if not ok]
    assert 200 < len(payloads) - len(left)


def test_kinds_and_statuses_by_number_and_name_match():
    docs = []
    for kind in (0, 1, 2, 3, 4, 5, "SPAN_KIND_SERVER", "SPAN_KIND_CLIENT", "SPAN_KIND_UNSPECIFIED", "server"):
        for status in ({}, {"code": 0}, {"code": 2, "message": "boom"}, {"code": "STATUS_CODE_ERROR"}, {"code": "OK"}):
            docs.append(one_span_doc(kind=kind, status=status))
    docs.append(one_span_doc())
    del docs[-1]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["kind"]
    assert assert_same([dumps(d) for d in docs]) == []


def test_optional_parts_and_unknown_fields_match():
    s = span(
        trace_id(),
        span_id(),
        "op",
        T0,
        T0 + MS,
        parent="",
        traceState="k=v",
        flags=257,
        events=[],
        links=[],
        droppedAttributesCount=0,
    )
    del s["name"]
    s["startTimeUnixNano"] = T0  # a number, not a string
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
                "resource": {"attributes": attrs({"service.name": 5, "x": "y"})},
                "scopeSpans": [
                    {"scope": {"name": "s", "version": "1"}, "spans": [span(trace_id(), span_id(), "b", T0, T0 + 1)]}
                ],
            }
        ]
    }
    bytes_service = {
        "resourceSpans": [
            {
                "resource": {"attributes": attrs({"service.name": b"svc"})},
                "scopeSpans": [{"spans": [span(trace_id(), span_id(), "c", T0, T0 + 1)]}],
            }
        ]
    }
    two_services = export([span(trace_id(), span_id(), "d", T0, T0 + 1)])
    two_services["resourceSpans"][0]["resource"]["attributes"] += attrs({"service.name": "second"})
    many = {
        "resourceSpans": [
            export([span(trace_id(), span_id(), "e", T0, T0 + 1)], service=f"svc{i}")["resourceSpans"][0]
            for i in range(3)
        ]
        + [{"resource": {}, "scopeSpans": []}]
    }
    pretty = json.dumps(export(native_request()[1]), indent=2).encode()
    empty = {"resourceSpans": []}
    assert (
        assert_same(
            [
                dumps(export([s])),
                dumps(no_resource),
                dumps(no_service),
                dumps(bytes_service),
                dumps(two_services),
                dumps(many),
                pretty,
                dumps(empty),
            ]
        )
        == []
    )


# -- span events: the reference decoder's rows ------------------------------------------------------------------
# A batch with span events is, without the C decoder, the reference decoder's alone (the DuckDB path hands it
# on): the C decoder writes every span of it as that path stores it (orjson's JSON), events under
# `budgetscope.events`.


def json_reference(payload: bytes):
    return otlp_json.decode(otlp_json.parse(payload))


def assert_same_as_reference(payloads: list[bytes]) -> list[int]:
    """The C decoder's rows equal the reference path's, byte for byte, for every batch it takes; returns the ids
    it left."""
    c, left = c_rows(payloads)
    ref, bad = reference_rows(payloads, json_reference)
    ref = sorted(ref)
    taken = set(range(1, len(payloads) + 1)) - set(left)
    assert not taken & set(bad), f"taken, but the reference rejects them: { {b: bad[b] for b in taken & set(bad)} }"
    assert c == [r for r in ref if r[0] in taken]
    return left


def has_events(payload: bytes) -> bool:
    """A span of the batch has a non-empty `events` list (the DuckDB path then hands the batch on)."""
    doc = json.loads(payload)
    return any(
        isinstance(s, dict) and isinstance(s.get("events"), list) and s["events"]
        for rs in doc["resourceSpans"]
        for ss in rs.get("scopeSpans") or ()
        for s in ss.get("spans") or ()
    )


def event(name="journey.QUEUED", time=T0 + 5, attributes=None, **extra) -> dict:
    e = {"timeUnixNano": str(time), "name": name, "attributes": attrs(attributes or {})}
    e.update(extra)
    return e


def test_spans_with_events_are_kept_as_the_reference_keeps_them():
    """Span events (vLLM journey tracing, Triton, TGI put their timings there) are kept under
    `budgetscope.events` in the attributes: name, time and attributes, as the reference decoder keeps them."""
    with_events = dumps(one_span_doc(attributes=attrs({"a": 1}), events=[event(attributes={"event.type": "QUEUED"})]))
    assert assert_same_as_reference([dumps(one_span_doc(events=[])), with_events]) == []
    table, _, _, _ = otlp_fast.decode([with_events], [1])
    assert json.loads(table.column("attributes")[0].as_py()) == {
        "a": 1,
        "budgetscope.events": [
            {"name": "journey.QUEUED", "time_unix_nano": T0 + 5, "attributes": {"event.type": "QUEUED"}}
        ],
    }
    # an empty list is no events: the DuckDB path's batch, as before
    assert assert_same([dumps(one_span_doc(events=[]))]) == []


def test_event_values_of_every_kind_match_the_reference():
    a = attrs(
        {
            "s": "x",
            "b": True,
            "f": False,
            "i": 7,
            "neg": -12,
            "min": -(2**63),
            "big": 2**63 - 1,
            "d": 1.5,
            "ts.monotonic": 80000.12345678912,  # 16-17 digits: journey's monotonic clock
            "tiny": 1e-7,
            "huge": 1e300,
            "third": 1 / 3,
            "negzero": -0.0,
            "arr": [1, 2.5, "z", True, b"\x01"],
            "empty_arr": [],
            "raw": b"\x00\x01\xff",
            "": "empty key",
        }
    )
    a += [
        {"key": "empty", "value": {}},
        {"key": "novalue"},
        {"key": "zeros", "value": {"intValue": "007"}},
        {"key": "negzero_int", "value": {"intValue": "-0"}},
        {"key": "asnumber", "value": {"intValue": 42}},
        {"key": "dint", "value": {"doubleValue": 3}},
        {"key": "dnegint", "value": {"doubleValue": -0}},
        {"key": "d19", "value": {"doubleValue": 1234567890123456789}},
        {"key": "dexp", "value": {"doubleValue": 1.25e-3}},
        {"key": "dbig_exp", "value": {"doubleValue": 1.5e16}},
        {"key": "arr_empty_el", "value": {"arrayValue": {"values": [{}, {"intValue": "1"}]}}},
    ]
    doc = one_span_doc(
        attributes=list(a),
        events=[event(attributes={}), {"name": "raw", "timeUnixNano": str(T0), "attributes": a}],
        droppedEventsCount=3,
    )
    assert assert_same_as_reference([dumps(doc)]) == []


def test_event_texts_with_escapes_and_unicode_match_the_reference():
    texts = ["tab\there", 'q"uote', "back\\slash", "\b\f\r\n", "\x01\x1f\x7f", "é 漢字 😀", "\u2028", "</a>", ""]
    a = [{"key": f"k{i}", "value": {"stringValue": t}} for i, t in enumerate(texts)]
    a.append({"key": 'weird\tkey"é', "value": {"arrayValue": {"values": [{"stringValue": t} for t in texts]}}})
    events = [event(name=t, attributes=None, attributes_extra=1) for t in texts]
    for e in events:
        e["attributes"] = a
    doc = one_span_doc(name='naïve "name"\n\x01', attributes=a, events=events)
    doc["resourceSpans"][0]["scopeSpans"][0]["scope"]["name"] = "scope\\é\x02"
    doc["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"] = "svc\t😀\x1f"
    # raw UTF-8, and every non-ASCII character escaped (json.dumps' default)
    assert assert_same_as_reference([dumps(doc), json.dumps(doc).encode()]) == []
    raw = dumps(one_span_doc(events=[event(name="PLACEHOLDER", attributes={"u": "PLACEHOLDER"})]))
    assert assert_same_as_reference([raw.replace(b"PLACEHOLDER", b"\\u00e9\\u0041\\ud83d\\ude00\\/\\u001f")]) == []


def test_event_times_names_and_shapes_match_the_reference():
    """Times as strings or numbers, negative, past int64 (orjson writes up to 2^64 - 1), with leading zeros, null
    or absent; names that are no string; members in any order; elements that are no object (left out); events
    before the attributes; many events; dropped counts; a span with events among spans without."""
    shapes = [
        [event(time=-5)],
        [event(time=0)],
        [event(time="9223372036854775807")],
        [event(time="-9223372036854775808")],
        [event(time="0000123")],
        [event(time="-0")],
        [{"timeUnixNano": T0 + 7, "name": "number time"}],
        [{"timeUnixNano": None, "name": None, "attributes": None}],
        [{"name": 5, "attributes": {"k": 1}}],
        [{"name": {"x": [1]}, "timeUnixNano": str(T0)}],
        [{}],
        [{"name": "a spanId", "spanId": "00f067aa0ba902b7"}],  # the reference counts no ids: taken
        [1, "x", None, [2], event(), True],
        [{"attributes": attrs({"k": "v"}), "droppedAttributesCount": 4, "timeUnixNano": str(T0), "name": "late"}],
        [event(name=f"e{i}", time=T0 + i, attributes={"i": i, "half": i / 2}) for i in range(300)],
    ]
    docs = [one_span_doc(events=e) for e in shapes]
    first = span(trace_id(), span_id(), "events first", T0, T0 + MS)
    first = {"events": [event()], **first}
    docs.append(export([first, span(trace_id(), span_id(), "plain", T0, T0 + 1, attributes={"c": "\x01", "d": 1e20})]))
    assert assert_same_as_reference([dumps(d) for d in docs]) == []


def test_vllm_journey_triton_and_tgi_exports_match_the_reference():
    from server_traces import as_exported, draw, tgi, triton, vllm_journey

    mix = draw("events", "queue", 40, failed_share=0.2)
    payloads = [
        json.dumps(d).encode()
        for write in (vllm_journey, triton, tgi)
        for d in as_exported([doc for r in mix.requests for doc in write(r, True)], 64)
    ]
    assert assert_same_as_reference(payloads) == []


@pytest.mark.parametrize(
    "case",
    [
        "kvlist in an event",
        "nested array in an event",
        "event name twice",
        "event time twice",
        "events twice",
        "time a word",
        "time with a fraction",
        "time with an exponent",
        "time past 2^64",
        "time below -2^63",
        "time true",
        "time with a plus",
        "time with blanks",
        "escaped repeat of a key in an event",
        "escaped repeat of a key beside events",
        "key twice in an event",
        "key twice beside events",
        "resource key twice",
        "int below -2^63",
        "double past the doubles",
        "20-digit integer double",
        "attribute named budgetscope.events",
        "event attributes of another kind",
        "link beside events",
    ],
)
def test_batches_with_events_it_cannot_vouch_for_are_left_whole(case):
    """Each left whole, whatever the reference decoder then decides (lands it, or rejects it)."""
    ev = event(attributes={"k": "v"})
    s = span(trace_id(), span_id(), "op", T0, T0 + MS, attributes={"a": 1}, events=[ev])
    doc = export([span(trace_id(), span_id(), "first", T0, T0 + 1), s])
    raw = None
    if case == "kvlist in an event":
        ev["attributes"] = attrs({"m": {"k": 1}})
    elif case == "nested array in an event":
        ev["attributes"] = attrs({"m": [[1]]})
    elif case == "event name twice":
        raw = dumps(doc).replace(b'"name":"journey.QUEUED"', b'"name":"a","name":"journey.QUEUED"')
    elif case == "event time twice":
        raw = dumps(doc).replace(b'"timeUnixNano"', b'"timeUnixNano":"1","timeUnixNano"')
    elif case == "events twice":
        raw = dumps(doc).replace(b'"events":', b'"events":[],"events":')
    elif case == "time a word":
        ev["timeUnixNano"] = "soon"
    elif case == "time with a fraction":
        ev["timeUnixNano"] = 1.5
    elif case == "time with an exponent":
        ev["timeUnixNano"] = 1e18
    elif case == "time past 2^64":
        ev["timeUnixNano"] = str(2**64)
    elif case == "time below -2^63":
        ev["timeUnixNano"] = str(-(2**63) - 1)
    elif case == "time true":
        ev["timeUnixNano"] = True
    elif case == "time with a plus":
        ev["timeUnixNano"] = "+5"
    elif case == "time with blanks":
        ev["timeUnixNano"] = " 5"
    elif case == "escaped repeat of a key in an event":
        ev["attributes"] += attrs({"PLACEHOLDER": 1})
        raw = dumps(doc).replace(b"PLACEHOLDER", b"\\u006b")
    elif case == "escaped repeat of a key beside events":
        s["attributes"] += attrs({"PLACEHOLDER": 1})
        raw = dumps(doc).replace(b"PLACEHOLDER", b"\\u0061")
    elif case == "key twice in an event":
        ev["attributes"] += attrs({"k": "again"})
    elif case == "key twice beside events":
        s["attributes"] += attrs({"a": 2})
    elif case == "resource key twice":
        doc["resourceSpans"][0]["resource"]["attributes"] += attrs({"x": 1, "y": 2, "x ": 3})
        doc["resourceSpans"][0]["resource"]["attributes"] += attrs({"x": 4})
    elif case == "int below -2^63":
        ev["attributes"] += [{"key": "m", "value": {"intValue": str(-(2**63) - 1)}}]
    elif case == "double past the doubles":
        raw = dumps(doc).replace(b'"stringValue":"v"', b'"doubleValue":1e400')
    elif case == "20-digit integer double":
        raw = dumps(doc).replace(b'"stringValue":"v"', b'"doubleValue":12345678901234567890')
    elif case == "attribute named budgetscope.events":
        s["attributes"] += attrs({"budgetscope.events": "mine"})
    elif case == "event attributes of another kind":
        raw = dumps(doc).replace(b'"attributes":[{"key":"k"', b'"attributes":[1,{"key":"k"')
    elif case == "link beside events":
        s["links"] = [{"traceId": trace_id(), "spanId": span_id()}]
    _left_alone(raw if raw is not None else doc)
    c, left = c_rows([raw if raw is not None else dumps(doc)])
    assert left == [1]


def test_the_events_key_is_the_schemas():
    assert otlp_fast._otlpjson.EVENTS_KEY == otlp_json.EVENTS_KEY


def test_mutated_batches_with_events_are_taken_only_as_the_reference_takes_them():
    """Random byte edits of a journey export: whatever the C decoder takes, the reference decoder takes to the
    same rows (in reference form when a span still has events, else as the DuckDB path)."""
    from server_traces import draw, vllm_journey

    base = [
        json.dumps(d, separators=(",", ":")).encode() for d in vllm_journey(draw("m", "queue", 1).requests[0], True)
    ]
    payloads = json_edits(base[:2], 300, 5)
    c, left = c_rows(payloads)
    ref, bad = reference_rows(payloads, json_reference)
    d, _ = duckdb_rows(payloads)
    taken = {r[0] for r in c}
    assert not taken & set(bad)
    with_events = {b for b in taken if has_events(payloads[b - 1])}
    assert c == sorted([r for r in ref if r[0] in with_events] + [r for r in d if r[0] in taken - with_events])
    assert len(taken) + len(left) == len(payloads) and 20 < len(with_events)


# -- what it leaves, whole -------------------------------------------------------------------------------------


def _left_alone(doc_or_bytes) -> None:
    good = dumps(export(native_request()[1]))
    bad = doc_or_bytes if isinstance(doc_or_bytes, bytes) else dumps(doc_or_bytes)
    c, left = c_rows([good, bad, good.replace(b"engine", b"other")])
    assert left == [2]
    assert {r[0] for r in c} == {1, 3} and len(c) == 12


@pytest.mark.parametrize(
    "case",
    [
        "base64 id",
        "uppercase E in id",
        "short id",
        "nested kvlist",
        "array in array",
        "NaN double",
        "16 digits",
        "1e21",
        "1e-7",
        "escaped NUL",
        "lone surrogate",
        "bad escape",
        "null value",
        "null field",
        "no spanId",
        "no start",
        "zero end",
        "ends before start",
        "field twice",
        "unknown value kind",
        "two kinds in a value",
        "spans under an unknown key",
        "trailing garbage",
        "not JSON",
        "truncated",
        "not an object",
        "invalid UTF-8",
        "raw control byte",
        "kind 9",
        "status code 7",
        "negative time",
        "20-digit int",
        "int with fraction",
        "string bool",
        "scope after spans",
        "resource after scopeSpans",
        "value before key",
        "resource attributes twice",
        "scope name twice",
        "status code twice",
        "resourceSpans twice",
    ],
)
def test_batches_it_cannot_vouch_for_are_left_whole(case):
    s = span(trace_id(), span_id(), "op", T0, T0 + MS, parent=span_id(), attributes={"k": "v"})
    a = s["attributes"]
    doc = export([span(trace_id(), span_id(), "first", T0, T0 + 1), s])
    raw = None
    if case == "base64 id":
        s["spanId"] = "AAAAAAAAAAE="
    elif case == "uppercase E in id":
        s["traceId"] = "E" * 31 + "G"
    elif case == "short id":
        s["parentSpanId"] = "abc"
    elif case == "nested kvlist":
        a.append({"key": "m", "value": {"kvlistValue": {"values": []}}})
    elif case == "array in array":
        a.append({"key": "m", "value": {"arrayValue": {"values": [{"arrayValue": {"values": []}}]}}})
    elif case == "NaN double":
        a.append({"key": "m", "value": {"doubleValue": "NaN"}})
    elif case == "16 digits":
        a.append({"key": "m", "value": {"doubleValue": 0.1234567890123456}})
    elif case == "1e21":
        a.append({"key": "m", "value": {"doubleValue": 1e21}})
    elif case == "1e-7":
        a.append({"key": "m", "value": {"doubleValue": 1e-7}})
    elif case == "escaped NUL":
        a.append({"key": "m", "value": {"stringValue": "a\x00b"}})
    elif case == "lone surrogate":
        raw = dumps(doc).replace(b'"v"', b'"\\ud800x"')
    elif case == "bad escape":
        raw = dumps(doc).replace(b'"v"', b'"\\q"')
    elif case == "null value":
        a.append({"key": "m", "value": {"stringValue": None}})
    elif case == "null field":
        s["parentSpanId"] = None
    elif case == "no spanId":
        del s["spanId"]
    elif case == "no start":
        del s["startTimeUnixNano"]
    elif case == "zero end":
        s["endTimeUnixNano"] = "0"
    elif case == "ends before start":
        s["endTimeUnixNano"] = str(T0 - 1)
    elif case == "field twice":
        raw = dumps(doc).replace(b'"name":"op"', b'"name":"op","name":"again"')
    elif case == "unknown value kind":
        a.append({"key": "m", "value": {"futureValue": 1}})
    elif case == "two kinds in a value":
        a.append({"key": "m", "value": {"stringValue": "a", "intValue": "1"}})
    elif case == "spans under an unknown key":
        doc["resourceSpans"][0]["instrumentationLibrarySpans"] = [{"spans": [span(trace_id(), span_id(), "x", T0, T0)]}]
    elif case == "trailing garbage":
        raw = dumps(doc) + b" x"
    elif case == "not JSON":
        raw = b"this is not json"
    elif case == "truncated":
        raw = dumps(doc)[:-40]
    elif case == "not an object":
        raw = b"[1, 2]"
    elif case == "invalid UTF-8":
        raw = dumps(doc).replace(b'"v"', b'"\xc3\x28"')
    elif case == "raw control byte":
        raw = dumps(doc).replace(b'"v"', b'"a\x01b"')
    elif case == "kind 9":
        s["kind"] = 9
    elif case == "status code 7":
        s["status"] = {"code": 7}
    elif case == "negative time":
        s["startTimeUnixNano"] = -5
    elif case == "20-digit int":
        a.append({"key": "m", "value": {"intValue": "12345678901234567890"}})
    elif case == "int with fraction":
        a.append({"key": "m", "value": {"intValue": 1.5}})
    elif case == "string bool":
        a.append({"key": "m", "value": {"boolValue": "true"}})
    elif case == "scope after spans":
        ss = doc["resourceSpans"][0]["scopeSpans"][0]
        doc["resourceSpans"][0]["scopeSpans"][0] = {"spans": ss["spans"], "scope": ss["scope"]}
    elif case == "resource after scopeSpans":
        rs = doc["resourceSpans"][0]
        doc["resourceSpans"][0] = {"scopeSpans": rs["scopeSpans"], "resource": rs["resource"]}
    elif case == "value before key":
        a.append({"value": {"stringValue": "v"}, "key": "m"})
    elif case == "resource attributes twice":
        raw = dumps(doc).replace(b'"resource":{"attributes":', b'"resource":{"attributes":[],"attributes":', 1)
    elif case == "scope name twice":
        raw = dumps(doc).replace(b'"scope":{"name":"budgetscope"', b'"scope":{"name":"a","name":"budgetscope"', 1)
    elif case == "status code twice":
        s["status"] = {"code": 1}
        raw = dumps(doc).replace(b'"status":{"code":1}', b'"status":{"code":1,"code":2}', 1)
    elif case == "resourceSpans twice":
        raw = dumps(doc)[:-1] + b',"resourceSpans":[]}'

    _left_alone(raw if raw is not None else doc)


def test_mutated_batches_are_taken_only_when_the_duckdb_path_agrees():
    """Random byte edits of a valid batch: whatever the C decoder takes, the DuckDB path takes identically."""
    payloads = json_edits([dumps(export(native_request(client=(1, 1), itl=[1.0])[1]))], 400, 11)
    c, left = c_rows(payloads)
    d, d_bad = duckdb_rows(payloads)
    taken = {r[0] for r in c}
    assert taken.isdisjoint(d_bad)
    assert c == [r for r in d if r[0] in taken]
    assert len(taken) + len(left) == len(payloads)


# -- through the archive ---------------------------------------------------------------------------------------


def with_and_without_c(tmp_path, ingest_text, monkeypatch, text: str, suffix: str = "") -> list[tuple]:
    """[(spans, ingest_batches, rejections, requests) with the C decoder, the same without]: `text` ingested into a
    new archive each time (`suffix` ".duckdb": a single file). Requests compare by repr (a one-token TPOT is NaN)."""
    query = (
        "SELECT trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, service_name, scope_name, "
        "status_code, CAST(attributes AS VARCHAR), CAST(resource AS VARCHAR), source, batch_id "
        "FROM spans ORDER BY batch_id, span_id"
    )
    batches = "SELECT batch_id, span_count, spans_inserted, duplicate_spans FROM ingest_batches ORDER BY batch_id"
    results = []
    for available in (True, False):
        monkeypatch.setattr(otlp_fast, "AVAILABLE", available)
        path = tmp_path / f"{available}{suffix}"
        rep = ingest_text(path, text)
        results.append(
            (
                rows(path, query),
                rows(path, batches),
                [(r.position, r.error) for r in rep.rejected],
                [tuple(repr(v) for v in r) for r in rows(path, "SELECT * FROM requests ORDER BY trace_id")],
            )
        )
    return results


def test_archive_holds_the_same_rows_with_and_without_the_c_decoder(tmp_path, ingest_text, monkeypatch):
    """A file mixing batches each path takes (C, DuckDB, reference), duplicates and a bad batch."""
    _, a = native_request(client=(3, 1))
    _, b = native_request(itl=[1.0, 2.0])
    nested = export([span(trace_id(), span_id(), "n", T0, T0 + 1, attributes={"m": {"k": [1, {"x": 2}]}})])
    b64 = export([span("S/kvNXezTaajzpKdDg5HNw==", span_id(), "b64", T0, T0 + 1)])
    bad = export([span(trace_id(), span_id(), "late", T0 + 5, T0)])
    # a "spanId" that is a value, not a key: counted on the bytes, the DuckDB path hands it on; C takes it
    word = export([span(trace_id(), span_id(), "word", T0, T0 + 1, attributes={"note": "spanId"})])
    text = jsonl(export(a), export(b), nested, b64, export(a[:2], service="again"), bad, export(a), word)
    results = with_and_without_c(tmp_path, ingest_text, monkeypatch, text, ".duckdb")
    assert results[0] == results[1]
    assert len(results[0][2]) == 1 and "ends before it starts" in results[0][2][0][1]
    assert len(results[0][0]) == 6 + 6 + 1 + 1 + 1 + 1


@pytest.mark.parametrize("one_per_chunk", [False, True])
def test_archive_with_events_holds_the_same_rows_with_and_without_the_c_decoder(
    tmp_path, ingest_text, monkeypatch, one_per_chunk
):
    """vLLM journey, Triton and TGI exports (events), an events batch the C decoder leaves (a kvlist in an event),
    a bad one, copies of spans with events, and plain batches: the same archive with the extension on and off,
    the events batches taken by the C decoder."""
    from budgetscope.ingest import batches
    from server_traces import as_exported, draw, tgi, triton, vllm_journey

    if one_per_chunk:
        monkeypatch.setattr(batches, "CHUNK_BYTES", 1)
    n = 4 if one_per_chunk else 12  # a chunk a batch costs a transaction each
    mix = draw("archive events", "queue", n, failed_share=0.25)
    docs = [
        d
        for write in (vllm_journey, triton, tgi)
        for d in as_exported([x for r in mix.requests for x in write(r, True)], 16)
    ]
    left = export([span(trace_id(), span_id(), "n", T0, T0 + 1, events=[event(attributes={"m": {"k": [1]}})])])
    bad = export([span(trace_id(), span_id(), "late", T0 + 5, T0, events=[event()])])
    copies = {"resourceSpans": docs[0]["resourceSpans"][:1]}
    text = jsonl(*docs, left, bad, copies, export(native_request()[1]))
    taken: dict[int, int] = {}
    real = otlp_fast.decode

    def spy(payloads, batch_ids, seen=None):
        out = real(payloads, batch_ids, seen)
        taken.update(out[1])
        return out

    monkeypatch.setattr(otlp_fast, "decode", spy)
    results = with_and_without_c(tmp_path, ingest_text, monkeypatch, text)
    assert results[0] == results[1]
    spans, _, rejected, requests = results[0]
    assert len(rejected) == 1 and "ends before it starts" in rejected[0][1]
    assert len(requests) == 3 * n + 1 and sum('"budgetscope.events"' in r[10] for r in spans) > 3 * n
    first_id = min(b for b, *_ in results[0][1])
    assert set(range(first_id, first_id + len(docs))) <= set(taken)  # every server export, by the C decoder
    assert first_id + len(docs) not in taken


@pytest.fixture
def one_batch_chunks(monkeypatch):
    """Every batch its own chunk (and its own transaction), as in a file larger than a chunk."""
    from budgetscope.ingest import batches

    monkeypatch.setattr(batches, "CHUNK_BYTES", 1)


@pytest.mark.parametrize("limit", [None, 3])
def test_copies_across_chunks_of_one_call_are_found(archive_path, ingest_text, one_batch_chunks, monkeypatch, limit):
    """The span set skips the look for copies only while no pair repeats; a full set (limit 3) looks always."""
    if limit:
        real = otlp_fast.span_set
        monkeypatch.setattr(otlp_fast, "span_set", lambda: real(limit))
    _, a = native_request()
    _, b = native_request()
    rep = ingest_text(archive_path, jsonl(export(a), export(b), export(a[2:4], service="again"), export(b[:1])))
    assert (rep.spans, rep.spans_inserted, rep.duplicate_spans, rep.rejected) == (15, 12, 3, [])
    assert rows(
        archive_path, "SELECT span_count, spans_inserted, duplicate_spans FROM ingest_batches ORDER BY batch_id"
    ) == [(6, 6, 0), (6, 6, 0), (2, 0, 2), (1, 0, 1)]
    assert rows(archive_path, "SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM spans") == [(12, 12)]


def test_copies_of_spans_stored_by_an_earlier_call_are_found(archive_path, ingest_text, one_batch_chunks):
    _, a = native_request()
    ingest_text(archive_path, jsonl(export(a)))
    _, b = native_request()
    rep = ingest_text(archive_path, jsonl(export(b), export(a[:2], service="again")))
    assert (rep.spans_inserted, rep.duplicate_spans) == (6, 2)
    assert rows(archive_path, "SELECT count(*), count(DISTINCT (trace_id, span_id)) FROM spans") == [(12, 12)]
    assert rows(archive_path, "SELECT DISTINCT service_name FROM spans") == [("engine",)]


def test_copies_of_spans_another_path_landed_in_the_call_are_found(archive_path, ingest_text, one_batch_chunks):
    """Spans landed by the DuckDB or reference path are not in the span set: from then on, every chunk looks."""
    tid = trace_id()
    s = span(tid, span_id(), "n", T0, T0 + 1, attributes={"m": {"k": 1}})  # a kvlist: the reference decoder's
    copy = dict(s, attributes=attrs({"m": "flat now"}))  # the same ids, a form the C decoder takes
    rep = ingest_text(archive_path, jsonl(export([s]), export([copy])))
    assert (rep.spans, rep.spans_inserted, rep.duplicate_spans) == (2, 1, 1)
    assert rows(archive_path, "SELECT attributes FROM spans") == [('{"m":{"k":1}}',)]


def test_span_set_finds_every_repeat():
    """Batches of many spans (the set inserts them a few ahead of where it hashes): a second call that repeats
    any one pair, wherever it sat, reports it; one that repeats none does not."""
    tid = trace_id()
    spans = [span(tid, span_id(), f"s{i}", T0, T0 + 1) for i in range(40)]
    for i in range(len(spans)):
        seen = otlp_fast.span_set()
        _, _, _, first = otlp_fast.decode([dumps(export(spans[:20])), dumps(export(spans[20:]))], [1, 2], seen)
        assert not first
        fresh = span(tid, span_id(), "new", T0, T0 + 1)
        _, _, _, again = otlp_fast.decode([dumps(export([fresh, spans[i]]))], [3], seen)
        assert again, i
        _, _, _, other = otlp_fast.decode([dumps(export([span(tid, span_id(), "x", T0, T0 + 1)]))], [4], seen)
        assert not other
    assert seen.count == 42 and not seen.full
    _, _, _, within = otlp_fast.decode([dumps(export(spans[:12] + spans[5:6]))], [5], otlp_fast.span_set())
    assert within
    tiny = otlp_fast.span_set(10)
    _, _, _, over = otlp_fast.decode([dumps(export(spans[:12]))], [6], tiny)
    assert over and tiny.full


def test_span_set_keeps_sequential_ids_apart():
    """Ids from a counter differ only in their last hex digits (the high bytes of the words the set hashes): no
    two of 20,000 such pairs may look like a repeat, or every ingest call of such a tracer looks for copies."""
    base_trace, base_span = 0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7
    docs = [
        dumps(
            export(
                [span(f"{base_trace + t:032x}", f"{base_span + 100 * t + s:016x}", "s", T0, T0 + 1) for s in range(100)]
            )
        )
        for t in range(200)
    ]
    seen = otlp_fast.span_set()
    _, taken, _, repeated = otlp_fast.decode(docs, list(range(200)), seen)
    assert sum(taken.values()) == 20_000 and seen.count == 20_000 and not repeated


def test_columns_that_outgrow_their_first_size_keep_every_byte():
    """A large resource repeated on thousands of spans outgrows the decoder's first guess many times over
    (from malloc'd to mapped memory, then remapped): the rows still equal the DuckDB path's."""
    doc = export([span(trace_id(), span_id(), f"s{i}", T0, T0 + i) for i in range(3000)])
    doc["resourceSpans"][0]["resource"]["attributes"] += attrs({f"r{i}": "x" * 40 for i in range(25)})
    table, taken, left, _ = otlp_fast.decode([dumps(doc)], [1])
    assert left == [] and taken == {1: 3000} and len(table.column("resource")[0].as_py()) > 1000
    assert assert_same([dumps(doc)]) == []
