"""Write the seed corpus, fuzz/corpus/<target>/, from the tests' own wire-format helpers (tests/otlp_wire.py)
and the repository's sample files. Run again after changing it; the files are committed, so a fuzz run needs
nothing but the repository.

    python fuzz/seeds.py
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from otlp_wire import MS, T0, attrs, export, native_request, span, span_id, to_proto, trace_id


def dumps(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def trace_docs() -> list[dict]:
    one = lambda **f: export([dict(span(trace_id(), span_id(), "op", T0, T0 + MS, parent=span_id()), **f)])  # noqa: E731 - a one-line helper where it is used
    scalars = attrs({"s": "x", "b": True, "i": -12, "d": 1.5, "arr": [1, 2.5, "z", True], "raw": b"\x00\xff"})
    scalars += [
        {"key": "empty", "value": {}},
        {"key": "big", "value": {"intValue": "-9223372036854775808"}},
        {"key": "dexp", "value": {"doubleValue": 1.25e-3}},
        {"key": "dup", "value": {"stringValue": "a"}},
        {"key": "dup", "value": {"stringValue": "b"}},
    ]
    escapes = [
        {"key": f"k{i}", "value": {"stringValue": t}}
        for i, t in enumerate(["tab\there", 'q"uote', "back\\slash", "\x01\x1f", "é 漢字 😀", "\u2028"])
    ]
    no_resource = {"resourceSpans": [{"scopeSpans": [{"spans": [span(trace_id(), span_id(), "a", T0, T0)]}]}]}
    return [
        export(native_request(client=(4, 2), tenant="t", itl=[1.0, 2.5])[1]),
        export(native_request()[1], service="engine-2", scope="other"),
        one(attributes=scalars),
        one(attributes=escapes, name='naïve "name"\n'),
        one(kind="SPAN_KIND_SERVER", status={"code": "STATUS_CODE_ERROR", "message": "boom"}),
        one(
            kind=3,
            status={"code": 1},
            traceState="k=v",
            flags=257,
            events=[{"timeUnixNano": str(T0), "name": "e"}],
            links=[],
        ),
        one(attributes=[{"key": "m", "value": {"kvlistValue": {"values": attrs({"x": 1})}}}]),
        one(attributes=[{"key": "d", "value": {"doubleValue": v}} for v in (0.1, 1e20, 1e-6, 123456789012345.0)]),
        no_resource,
        {"resourceSpans": []},
        *event_docs(one, scalars, escapes),
    ]


def event_docs(one, scalars: list, escapes: list) -> list[dict]:
    """Spans with events (the C decoders keep them as the reference decoders do): vLLM journey tracing's shape,
    every value kind, escapes, odd times and shapes, many events."""
    ev = lambda name="journey.QUEUED", t=str(T0 + 5), a=(): {"timeUnixNano": t, "name": name, "attributes": list(a)}  # noqa: E731 - a one-line helper where it is used
    journey = attrs({"event.type": "QUEUED", "ts.monotonic": 80000.12345678912, "scheduler.step": 1, "phase": "x"})
    return [
        one(attributes=attrs({"gen_ai.request.id": "r"}), events=[ev(a=journey), ev("api.ARRIVED", str(T0))]),
        one(attributes=scalars[:-1], events=[ev(a=scalars[:-1]), ev(a=escapes)], droppedEventsCount=1),
        one(
            events=[
                ev(t="-5"),
                ev(t=str(2**63 - 1)),
                {"timeUnixNano": T0, "name": None, "attributes": None, "droppedAttributesCount": 2},
                {},
                1,
                ev('q"\x01é', "007"),
            ]
        ),
        one(events=[ev(f"e{i}", str(T0 + i), attrs({"i": i, "d": i / 3})) for i in range(40)]),
        one(events=[ev(a=[{"key": "m", "value": {"kvlistValue": {"values": attrs({"x": 1})}}}])]),  # left
    ]


def trace_json_seeds() -> list[bytes]:
    docs = trace_docs()
    out = [dumps(d) for d in docs]
    out.append(json.dumps(docs[0], indent=1).encode())  # pretty, \u escapes
    bad = copy.deepcopy(docs[4])
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "AAAAAAAAAAE="  # base64: left to the others
    out.append(dumps(bad))
    late = copy.deepcopy(docs[4])
    late["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["endTimeUnixNano"] = str(T0 - 1)  # rejected
    out.append(dumps(late))
    return out


def trace_proto_seeds() -> list[bytes]:
    from google.protobuf.json_format import ParseError

    out = []
    for d in trace_docs():
        try:
            out.append(to_proto(d))
        except ParseError:  # JSON only: a negative event time, events that are no objects
            continue
    return out


def metrics_docs() -> list[dict]:
    point = lambda v, **a: {"timeUnixNano": str(T0), **v, "attributes": attrs(a)}  # noqa: E731 - a one-line helper where it is used
    return [
        {
            "resourceMetrics": [
                {
                    "resource": {"attributes": attrs({"host.name": "h", "service.name": "gpu"})},
                    "scopeMetrics": [
                        {
                            "scope": {"name": "budgetscope"},
                            "metrics": [
                                {
                                    "name": "hw.gpu.utilization",
                                    "unit": "1",
                                    "gauge": {
                                        "dataPoints": [
                                            point({"asDouble": 0.5}, **{"gpu.uuid": "GPU-1", "gpu.index": 0}),
                                            point({"asInt": "7"}, **{"hw.id": "GPU-2", "gpu.index": "1"}),
                                        ]
                                    },
                                },
                                {
                                    "name": "hw.gpu.memory.usage",
                                    "unit": "By",
                                    "sum": {"dataPoints": [point({"asInt": "1024"}, **{"gpu.uuid": "GPU-1"})]},
                                },
                                {"name": "sdk.own", "gauge": {"dataPoints": [point({"asDouble": 1.0})]}},
                                {"name": "h", "histogram": {"dataPoints": []}},
                            ],
                        }
                    ],
                }
            ]
        },
        {
            "resourceMetrics": [
                {
                    "resource": {"attributes": attrs({"gpu.uuid": "GPU-9", "gpu.index": 3})},
                    "scopeMetrics": [
                        {
                            "metrics": [
                                {
                                    "name": "budgetscope.gpu.memory.activity",
                                    "gauge": {"dataPoints": [point({"asDouble": "NaN"})]},
                                }
                            ]
                        }
                    ],
                }
            ]
        },
    ]


def metrics_seeds() -> list[bytes]:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    out = []
    for d in metrics_docs():
        out.append(b"\x00" + dumps(d))
        out.append(b"\x01" + json_format.ParseDict(d, ExportMetricsServiceRequest()).SerializeToString())
    return out


BUDGETS = [
    """[tiers.interactive]
match = { model = "llama-3-8b" }
percentile = 99
ttft_ms = 800
tpot_ms = 50
e2e_ms = 12000

[tiers.interactive.stages]
network = 50
frontend = 30
queue = 250
prefill = 470
""",
    "[tiers.default]\nttft_ms = 1000.5\n",
    '[tiers.batch]\npercentile = 90.5\ne2e_ms = 60000\nmatch = { tenant = "t", service_name = "s", tier = "x" }\n'
    "stages = { decode = 50000, postprocess = 10 }\n",
    "[tiers.a]\nttft_ms = 10\n[tiers.a.stages]\nqueue = 20\n",
    "[tiers.a]\nttft_ms = inf\n",
    "[tiers]\n",
    "title = 'x'\n[tiers.a]\nttft_ms = 1\n",
]

PROMETHEUS = [
    "# TYPE a counter\n# HELP a help\na_total 1\n",
    '{"vllm.requests.waiting", model_name="m"} 3\n',
    '{"a.b", "model.name"="m", x="y"} 3\n',
    '{__name__="a", x="y"} 3\n',
    'a_bucket{le="1"} 0\na_bucket{le="+Inf"} 3\na_count 3\na_sum 2\n',
    'a{foo="bar", bar="b{a}z"} 1\na{foo="baz"} -Inf\nb NaN\n',
    'a{ foo = "bar" } 1\na\t\t{\t\tfoo\t\t=\t\t"baz"\t\t}\t\t2\na{foo="bez"}6\n',
    'a{foo="bar",} 1\nb{,} 2\nc{} 3\n',
    'a{foo="b\\"a\\nr"} 1\na{foo="b\\\\a\\z"} 2\n',
    'a{foo="bar"} 1\t000\nb 2  1234567890\nc 1 1700000000123.5\nd 2 1.7e12\ne 1 -1000\n',
    'vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-0.6B"} 0.0\n',
    'a{x="1",x="2"} 1\n',
]

QUERIES = [
    "SELECT count(*), avg(ttft_ms) FROM requests",
    "SELECT tier, quantile_cont(e2e_ms, 0.99) FROM requests GROUP BY 1 ORDER BY 1",
    "SELECT name, attributes FROM spans LIMIT 3",
    "EXPLAIN SELECT * FROM spans",
    "WITH t AS (SELECT * FROM requests) SELECT * FROM t WHERE queue_ms > 1",
    "SELECT * FROM read_csv('@SECRET@.csv')",
    "SELECT * FROM read_text('@SECRET@.txt')",
    "SELECT * FROM read_json_auto('@SECRET@.json')",
    "SELECT * FROM '@SECRET@.csv'",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM parquet_scan('@SECRET@.csv')",
    "COPY spans TO '@SECRET@.out'",
    "COPY (SELECT 1) TO '@SECRET@.csv'",
    "ATTACH '@SECRET@.db' AS x",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "RESET enable_external_access",
    "PRAGMA enable_profiling",
    "CREATE TABLE t AS SELECT 1",
    "INSERT INTO spans SELECT * FROM spans",
    "DELETE FROM requests",
    "SELECT getenv('HOME')",
    "SELECT current_setting('enable_external_access')",
    "SELECT * FROM duckdb_settings()",
    "SELECT 1; SELECT * FROM read_csv('@SECRET@.csv')",
    "EXPLAIN ANALYZE SELECT * FROM read_csv('@SECRET@.csv')",
    "SELECT * FROM (FROM read_text('@SECRET@.txt'))",
    "CALL pragma_table_info('spans')",
    "EXPLAIN ANALYZE COPY (SELECT * FROM spans LIMIT 0) TO '@SEGMENT@' (FORMAT parquet, USE_TMP_FILE false)",
    "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
    "COPY spans TO '@SEGMENT@' (FORMAT parquet)",
    "SELECT * FROM '@SEGMENT@'",
    "SELECT * FROM read_parquet('@ARCHIVE@/**/*.parquet')",
    "EXPORT DATABASE '@ARCHIVE@'",
    "SELECT current_setting('allowed_paths')",
    "SELECT * FROM query('COPY spans TO ''@SEGMENT@''')",
    "EXPORT DATABASE '@SECRET@.dir'",
    "SELECT * FROM sniff_csv('@SECRET@.csv')",
]


def http_seeds() -> list[bytes]:
    """Whole connections' bytes: valid requests of every framing the receiver serves, pipelined, and each
    malformed request of tests/hostile_http.py (its 6 MiB gzip body cut to 100 members)."""
    import gzip
    import zlib

    from hostile_http import FRAMING, HEAD, REQUEST_LINES

    body = to_proto(export(native_request()[1]))
    js = dumps(export(native_request()[1]))

    def post(payload: bytes, extra: bytes = b"", head: bytes = HEAD) -> bytes:
        return head + extra + b"Content-Length: %d\r\n\r\n" % len(payload) + payload

    def chunked(payload: bytes, sizes: list[int], ext: bytes = b"", trailers: bytes = b"") -> bytes:
        out, i = HEAD + b"Transfer-Encoding: chunked\r\n\r\n", 0
        for n in sizes:
            out += b"%x%s\r\n%s\r\n" % (n, ext, payload[i : i + n])
            i += n
        return out + b"0\r\n" + trailers + b"\r\n"

    json_head = HEAD.replace(b"application/x-protobuf", b"application/json")
    get = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    half = len(body) // 2
    seeds = [
        post(body),
        post(js, head=json_head),
        post(gzip.compress(body, mtime=0), b"Content-Encoding: gzip\r\n"),
        post(gzip.compress(body[:half], mtime=0) + gzip.compress(body[half:], mtime=0), b"Content-Encoding: gzip\r\n"),
        post(zlib.compress(body), b"Content-Encoding: deflate\r\n"),
        post(zlib.compress(body)[2:-4], b"Content-Encoding: deflate\r\n"),
        chunked(body, [half, len(body) - half]),
        chunked(body, [len(body)], b';name=value;q="a \\" b"', b"X-Trailer: 1\r\n"),
        post(body) + get + post(body) + b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n",
        get * 20,
        b"\r\n" + post(body, b"Connection: close\r\n") + post(body),
        post(body, head=HEAD.replace(b"HTTP/1.1", b"HTTP/1.0"), extra=b"Connection: keep-alive\r\n") + get,
        HEAD.replace(b"/v1/traces", b"/v1/metrics") + b"Content-Length: 2\r\n\r\n{}",
        post(body, b"Authorization: Bearer nope\r\n"),
        post(body, b"Expect: 100-continue\r\n"),
        HEAD + b"Content-Length: 100\r\n\r\n" + body[:50],
    ]
    for _, rest, _ in FRAMING:
        seeds.append(HEAD + rest.replace(b"%d\r\n\r\n" % (20 * 314_572), b"2000\r\n\r\n")[:4000])
    seeds += [data for _, data, _ in REQUEST_LINES]
    return seeds


def inflate_seeds() -> list[bytes]:
    """First byte even: gzip, odd: deflate (zlib-wrapped or raw); multi-member, empty, truncated, padded,
    too many members, past the target's 4 KiB limit, incompressible."""
    import gzip
    import random
    import zlib

    text = dumps(export(native_request()[1]))
    noise = random.Random(37).randbytes(3000)
    gz = lambda b: gzip.compress(b, mtime=0)  # noqa: E731 - a one-line helper where it is used
    return [
        b"\x00" + gz(text[:4000]),
        b"\x00" + gz(text[:100]) + gz(text[100:3000]),
        b"\x02" + gz(bytes(3000)) + gz(b"tail"),  # fed 61 bytes: a member's end in the call that fills a step
        b"\x00" + gz(b"") * 70,
        b"\x00" + gz(b"") * 3 + gz(b"x"),
        b"\x00" + gz(text[:500])[:-3],
        b"\x00" + gz(b"q") + b"\x00\x00",
        b"\x00" + gz(bytes(5000)),
        b"\x00" + gz(noise),
        b"\x00",
        b"\x01" + zlib.compress(text[:3000]),
        b"\x01" + zlib.compress(text[:3000])[2:-4],
        b"\x01" + zlib.compress(text[:3000]) + b"trailing",
        b"\x01" + zlib.compress(bytes(8000), 9),
    ]


def write(target: str, seeds: list[bytes]) -> None:
    d = ROOT / "fuzz/corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    for old in d.iterdir():
        old.unlink()
    for s in seeds:
        (d / hashlib.sha1(s).hexdigest()[:16]).write_bytes(s)
    print(f"{target}: {len(seeds)} seeds")


def main() -> None:
    js, pb = trace_json_seeds(), trace_proto_seeds()
    for t in ("otlpjson", "otlpjson_diff"):
        write(t, js)
    for t in ("otlpproto", "otlpproto_diff"):
        write(t, pb)
    write("otlp_metrics", metrics_seeds())
    write("budgets", [b.encode() for b in BUDGETS] + [(ROOT / "budgetscope/data/demo_budgets.toml").read_bytes()])
    write("prometheus", [p.encode() for p in PROMETHEUS])
    write("query", [q.encode() for q in QUERIES])
    write("inflate", inflate_seeds())
    write("http", http_seeds())


if __name__ == "__main__":
    main()
