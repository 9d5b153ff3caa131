"""`TraceRouter` / `budgetscope collect-router`: OTLP/HTTP split by trace id in front of collector shards."""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from budgetscope.archive.shards import shard_path
from budgetscope.collector.router import TraceRouter, shard_of, split
from budgetscope.collector.server import Collector
from conftest import rows
from otlp_wire import export, span, to_proto

SPANS = "SELECT trace_id, span_id FROM spans ORDER BY 1, 2"


def many_traces(n_traces: int = 40, per_trace: int = 3, first: int = 1, t0: int = 1_700_000_000 * 10**9) -> dict:
    """One export of `n_traces` traces (numbered from `first`) of `per_trace` spans each, in two resources and
    two scopes."""
    spans = [
        span(f"{t:032x}", f"{t:08x}{k:08x}", f"stage{k}", t0 + t * 1000, t0 + t * 1000 + 500)
        for t in range(first, first + n_traces)
        for k in range(per_trace)
    ]
    half = len(spans) // 2
    a, b = export(spans[:half], service="engine", scope="s1"), export(spans[half:], service="frontend", scope="s2")
    return {"resourceSpans": a["resourceSpans"] + b["resourceSpans"]}


def ids_of(doc: dict) -> list[tuple[str, str, str, str]]:
    """(trace id, span id, service, scope) of every span of an OTLP/JSON export."""
    return [
        (s["traceId"], s["spanId"], rs["resource"]["attributes"][0]["value"]["stringValue"], ss["scope"]["name"])
        for rs in doc["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    ]


def proto_ids(body: bytes) -> list[tuple[str, str, str, str]]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    m = ExportTraceServiceRequest.FromString(body)
    return [
        (s.trace_id.hex(), s.span_id.hex(), rs.resource.attributes[0].value.string_value, ss.scope.name)
        for rs in m.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    ]


@pytest.mark.parametrize("fmt", ["otlp-json", "otlp-proto"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_every_span_lands_in_exactly_one_part_of_its_trace_shard(fmt, n):
    doc = many_traces()
    payload = json.dumps(doc).encode() if fmt == "otlp-json" else to_proto(doc)
    parts = split(payload, fmt, n)
    read = (lambda b: ids_of(json.loads(b))) if fmt == "otlp-json" else proto_ids
    got = [(i, x) for i, p in parts.items() for x in read(p.body)]
    assert sorted(x for _, x in got) == sorted(ids_of(doc))  # every span once, resource and scope kept
    assert all(i == shard_of(bytes.fromhex(x[0]), n) for i, x in got)
    assert {i: p.spans for i, p in parts.items()} == {i: sum(1 for j, _ in got if j == i) for i in parts}
    if n > 1:
        assert len(parts) == n  # 40 traces reach every shard of 4
    else:
        assert parts[0].body == payload  # one shard: forwarded as its bytes
    assert {i: p.body for i, p in split(payload, fmt, n).items()} == {i: p.body for i, p in parts.items()}


def test_a_body_that_is_not_otlp_is_rejected_by_the_router():
    from budgetscope.ingest.spanbatch import BadBatch

    with pytest.raises(BadBatch, match="not an OTLP protobuf trace export"):
        split(b"\xff\xff\xff", "otlp-proto", 2)
    with pytest.raises(BadBatch, match="not JSON"):
        split(b"{nope", "otlp-json", 2)


@pytest.fixture
def fleet(tmp_path):
    """Two real collectors writing shards a and b of tmp_path/fleet, in this process."""
    root = tmp_path / "fleet"
    cs = [Collector(shard_path(root, s), grpc_port=None, http_port=0, linger_s=0.01) for s in ("a", "b")]
    for c in cs:
        c.start()
    yield root, cs
    for c in cs:
        if c._state != "stopped":
            c.stop()


def shard_urls(cs) -> list[str]:
    return [f"http://127.0.0.1:{c.http_port}" for c in cs]


def test_exports_through_the_router_land_each_span_once_on_its_shard(fleet, tmp_path):
    root, cs = fleet
    docs = [many_traces(30, 3, first=1 + 30 * k) for k in range(4)]
    with TraceRouter(shard_urls(cs), port=0, connections=1) as router, httpx.Client(timeout=30) as client:
        url = f"http://127.0.0.1:{router.port}/v1/traces"
        for k, doc in enumerate(docs):
            if k % 2:
                r = client.post(url, content=to_proto(doc), headers={"content-type": "application/x-protobuf"})
                assert (r.status_code, r.content) == (200, b"")
            else:
                r = client.post(url, json=doc)
                assert (r.status_code, r.json()) == (200, {})
    for c in cs:
        c.stop()
    sent = sorted((x[0], x[1]) for d in docs for x in ids_of(d))
    assert rows(root, SPANS) == sent
    for i, s in enumerate("ab"):
        assert all(shard_of(bytes.fromhex(t), 2) == i for t, _ in rows(root / f"shard={s}", SPANS))
    assert router.stats.spans_landed == len(sent) and router.stats.landed == 4


class FakeShard(http.server.ThreadingHTTPServer):
    """A fake collector that answers every POST with `status` and an OTLP/JSON Status naming it; `reject_status`
    for a body that holds `reject`; the first answer after `first_delay_s`."""

    def __init__(self, status: int, reject: bytes | None = None, first_delay_s: float = 0.0, reject_status: int = 400):
        self.status, self.bodies = status, []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(h):
                self.bodies.append(h.rfile.read(int(h.headers["content-length"])))
                if len(self.bodies) == 1:
                    time.sleep(first_delay_s)
                status = reject_status if reject is not None and reject in self.bodies[-1] else self.status
                body = b"{}" if status == 200 else json.dumps({"code": 3, "message": f"fake {status}"}).encode()
                h.send_response(status)
                h.send_header("Content-Type", "application/json")
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                h.wfile.write(body)

            def log_message(h, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.mark.parametrize(
    ("statuses", "want", "retry_after"),
    [
        ((200, 200), 200, False),
        ((200, 429), 429, True),
        ((429, 503), 503, True),
        ((400, 503), 503, True),
        ((400, 400), 400, False),
    ],
)
def test_the_answer_is_the_union_of_the_shards_answers(statuses, want, retry_after):
    fakes = [FakeShard(s) for s in statuses]
    try:
        urls = [f"http://127.0.0.1:{f.server_port}" for f in fakes]
        with TraceRouter(urls, port=0, connections=1) as router:
            r = httpx.post(f"http://127.0.0.1:{router.port}/v1/traces", json=many_traces(), timeout=30)
        assert r.status_code == want
        assert ("retry-after" in r.headers) is retry_after
        if want == 400:
            assert r.json()["message"] == f"shard {urls[0]}: fake 400"
        if want in (429, 503):
            assert "not landed on every shard, retry later" in r.json()["message"]
        assert all(len(f.bodies) == 1 for f in fakes)
    finally:
        for f in fakes:
            f.shutdown()


@pytest.mark.parametrize("fmt", ["json", "proto"])
def test_spans_rejected_by_one_shard_are_a_partial_success(fmt):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    fakes = [FakeShard(200), FakeShard(400)]
    try:
        urls = [f"http://127.0.0.1:{f.server_port}" for f in fakes]
        doc = many_traces()
        on_b = sum(1 for x in ids_of(doc) if shard_of(bytes.fromhex(x[0]), 2) == 1)
        with TraceRouter(urls, port=0, connections=1) as router:
            url = f"http://127.0.0.1:{router.port}/v1/traces"
            r = (
                httpx.post(url, json=doc)
                if fmt == "json"
                else httpx.post(url, content=to_proto(doc), headers={"content-type": "application/x-protobuf"})
            )
        assert r.status_code == 200
        if fmt == "json":
            assert r.json() == {
                "partialSuccess": {"rejectedSpans": str(on_b), "errorMessage": f"shard {urls[1]}: fake 400"}
            }
        else:
            partial = ExportTraceServiceResponse.FromString(r.content).partial_success
            assert partial.rejected_spans == on_b and partial.error_message.startswith(f"shard {urls[1]}: ")
    finally:
        for f in fakes:
            f.shutdown()


def test_a_shard_down_is_503_and_the_retry_lands_every_span_once(fleet):
    root, cs = fleet
    port_b = cs[1].http_port
    cs[1].stop()  # shard b is down: its port refuses connections
    doc = many_traces()
    with TraceRouter(shard_urls(cs[:1]) + [f"http://127.0.0.1:{port_b}"], port=0, connections=1) as router:
        url = f"http://127.0.0.1:{router.port}/v1/traces"
        r = httpx.post(url, json=doc, timeout=30)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert f"shard http://127.0.0.1:{port_b} is unreachable" in r.json()["message"]
        assert rows(root / "shard=b", "SELECT count(*) FROM spans") == [(0,)]  # nothing of b's part landed
        b = Collector(shard_path(root, "b"), grpc_port=None, http_port=port_b, linger_s=0.01)
        b.start()  # back on the same port: the exporter's retry lands b's part; a's part is stored once
        try:
            assert httpx.post(url, json=doc, timeout=30).status_code == 200
        finally:
            b.stop()
    cs[0].stop()
    assert rows(root, SPANS) == sorted((x[0], x[1]) for x in ids_of(doc))


def post_proto(url: str, doc: dict) -> httpx.Response:
    return httpx.post(url, content=to_proto(doc), headers={"content-type": "application/x-protobuf"}, timeout=30)


def test_parts_waiting_for_a_shard_go_as_one_export_each_span_once():
    fakes = [FakeShard(200, first_delay_s=1.5), FakeShard(200, first_delay_s=1.5)]
    docs = [many_traces(20, 3, first=1 + 20 * k) for k in range(6)]
    try:
        with TraceRouter([f"http://127.0.0.1:{f.server_port}" for f in fakes], port=0, connections=1) as router:
            url = f"http://127.0.0.1:{router.port}/v1/traces"
            with ThreadPoolExecutor(6) as pool:
                first = pool.submit(post_proto, url, docs[0])
                time.sleep(0.2)  # the first is at the shards (answered after 1.5 s): the others wait meanwhile
                assert [r.status_code for r in pool.map(lambda d: post_proto(url, d), docs[1:])] == [200] * 5
                assert first.result().status_code == 200
        for i, f in enumerate(fakes):
            assert len(f.bodies) < 6  # fewer exports than requests: the parts that waited went together
            got = [x for b in f.bodies for x in proto_ids(b)]
            assert sorted(got) == sorted(x for d in docs for x in ids_of(d) if shard_of(bytes.fromhex(x[0]), 2) == i)
        assert router.stats.spans_landed == 6 * 60 and all(s.parts == 6 for s in router.shards)
    finally:
        for f in fakes:
            f.shutdown()


@pytest.mark.parametrize("refusal", [400, 413])
def test_a_rejected_export_of_several_parts_lands_the_good_ones(refusal):
    bad = many_traces(5, 2, first=900)
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] = "bad-span"
    fake = FakeShard(200, reject=b"bad-span", first_delay_s=1.5, reject_status=refusal)
    try:
        with TraceRouter([f"http://127.0.0.1:{fake.server_port}"], port=0, connections=1) as router:
            url = f"http://127.0.0.1:{router.port}/v1/traces"
            with ThreadPoolExecutor(4) as pool:
                first = pool.submit(post_proto, url, many_traces(5, 2, first=1))
                time.sleep(0.2)  # the first export is at the shard: the next three wait, then go as one
                rest = list(
                    pool.map(
                        lambda d: post_proto(url, d), [many_traces(5, 2, first=100), bad, many_traces(5, 2, first=200)]
                    )
                )
        assert first.result().status_code == 200
        assert [r.status_code for r in rest] == [200, 400, 200]
        assert len(fake.bodies) == 1 + 1 + 3  # the first; the three together (400); each alone
    finally:
        fake.shutdown()


RUN = [sys.executable, "-m", "budgetscope.cli", "collect-router"]


def test_collect_router_help_and_bad_shards_in_one_line(tmp_path):
    out = subprocess.run([*RUN, "--help"], check=False, capture_output=True, text=True)
    assert out.returncode == 0 and "--shard" in out.stdout and "crc32" in out.stdout
    for args, msg in [
        ([], "give at least one --shard"),
        (["--shard", "ftp://x:1"], "shard 'ftp://x:1': give http://HOST:PORT"),
    ]:
        out = subprocess.run([*RUN, "--port", "0", *args], check=False, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and out.stderr.startswith("budgetscope: ") and msg in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        out = subprocess.run(
            [*RUN, "--port", str(taken.getsockname()[1]), "--shard", "http://127.0.0.1:9"],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 2 and out.stderr.startswith("budgetscope: cannot listen on 127.0.0.1:"), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_collect_router_command_routes_and_summarises(fleet):
    root, cs = fleet
    proc = subprocess.Popen(
        [*RUN, "--port", "0", *[a for u in shard_urls(cs) for a in ("--shard", u)]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    banner = proc.stdout.readline()
    m = re.match(r"budgetscope collect-router: OTLP/HTTP http://127\.0\.0\.1:(\d+)/v1/traces → 2 shards", banner)
    assert m, banner + (proc.stderr.read() if proc.poll() is not None else "")
    doc = many_traces()
    assert httpx.post(f"http://127.0.0.1:{m.group(1)}/v1/traces", json=doc, timeout=30).status_code == 200
    proc.terminate()
    assert proc.wait(30) == 0, proc.stderr.read()
    summary = proc.stdout.read()
    assert f"1 requests (1 landed, 0 partial, 0 rejected, 0 retryable), {len(ids_of(doc))} spans landed" in summary
    for c in cs:
        c.stop()
    assert rows(root, "SELECT count(*) FROM spans") == [(len(ids_of(doc)),)]
