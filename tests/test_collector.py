"""`Collector`: real OpenTelemetry exporters → OTLP/HTTP and OTLP/gRPC on free ports → the archive."""

from __future__ import annotations

import gzip
import threading
import time
import zlib

import httpx
import orjson
import pytest

from budgetscope.collector import Collector, CollectorError
from budgetscope.instrument import Instrumentation
from conftest import rows

grpc = pytest.importorskip("grpc")
from google.rpc import error_details_pb2, status_pb2  # noqa: E402 - needs grpcio's companions
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from budgetscope.instrument.otlp_json import encode_request

STAGES = ["stage.frontend", "stage.queue", "stage.prefill", "stage.decode"]


@pytest.fixture(autouse=True)
def _clean_otlp_env(monkeypatch):
    for name in (
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_SERVICE_NAME",
    ):
        monkeypatch.delenv(name, raising=False)


def _requests(instr: Instrumentation, n: int, tier: str = "interactive") -> None:
    for i in range(n):
        req = instr.start_request(model="tiny", tier=tier, request_id=f"req-{tier}-{i}")
        req.mark("queue")
        req.mark("prefill")
        req.token()
        req.token()
        req.finish(outcome="ok", input_tokens=5)


def _export(exporter, n: int, tier: str = "interactive") -> None:
    instr = Instrumentation(service_name="engine-under-test", exporter=exporter)
    _requests(instr, n, tier)
    assert instr.flush(timeout_s=20)
    instr.shutdown()


def _bodies(n: int = 3) -> tuple[bytes, bytes]:
    """One export of `n` requests as (OTLP protobuf, OTLP/JSON)."""
    memory = InMemorySpanExporter()
    _export(memory, n, tier="batch")
    spans = memory.get_finished_spans()
    return encode_spans(spans).SerializeToString(), orjson.dumps(encode_request(spans))


def _post(port: int, body: bytes, ctype: str = "application/x-protobuf", **headers) -> httpx.Response:
    return httpx.post(
        f"http://127.0.0.1:{port}/v1/traces", content=body, headers={"Content-Type": ctype, **headers}, timeout=30
    )


def _counts(path) -> tuple[int, int, int]:
    return rows(
        path,
        "SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM requests), (SELECT count(*) FROM ingest_batches)",
    )[0]


# -- real exporters -------------------------------------------------------------------------------------------
def test_http_protobuf_export_lands_spans_and_requests(archive_path):
    with Collector(archive_path, grpc_port=0, http_port=0) as c:
        _export(HttpExporter(endpoint=f"http://127.0.0.1:{c.http_port}/v1/traces"), 10)
    names = rows(archive_path, "SELECT name, count(*) FROM spans GROUP BY 1 ORDER BY 1")
    assert names == sorted([("text_completion tiny", 10)] + [(s, 10) for s in STAGES])
    (req,) = rows(
        archive_path,
        """SELECT count(*), min(source), min(tier), min(service_name), min(model),
        count(queue_ms), count(prefill_ms), count(decode_ms), min(output_tokens) FROM requests""",
    )
    assert req == (10, "native", "interactive", "engine-under-test", "tiny", 10, 10, 10, 2)
    assert rows(archive_path, "SELECT DISTINCT origin, format FROM ingest_batches") == [("otlp-http", "otlp-proto")]
    assert c.stats.spans == 50 and c.stats.batches_rejected == 0


def test_grpc_export_lands_spans_and_requests(archive_path):
    with Collector(archive_path, grpc_port=0, http_port=0) as c:
        _export(GrpcExporter(endpoint=f"127.0.0.1:{c.grpc_port}", insecure=True), 7)
    assert rows(archive_path, "SELECT count(*), min(tier) FROM requests") == [(7, "interactive")]
    assert rows(archive_path, "SELECT count(*) FROM spans") == [(35,)]
    assert rows(archive_path, "SELECT DISTINCT origin FROM ingest_batches") == [("otlp-grpc",)]


def test_gzip_http_and_grpc_exports_land(archive_path):
    with Collector(archive_path, grpc_port=0, http_port=0) as c:
        _export(HttpExporter(endpoint=f"http://127.0.0.1:{c.http_port}/v1/traces", compression=Compression.Gzip), 4)
        _export(GrpcExporter(endpoint=f"127.0.0.1:{c.grpc_port}", insecure=True, compression=grpc.Compression.Gzip), 3)
    assert rows(archive_path, "SELECT count(*) FROM requests") == [(7,)]


def test_json_gzip_and_deflate_bodies_land(archive_path):
    (_, doc), (_, doc2), (proto, _) = _bodies(), _bodies(), _bodies()
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        r = _post(c.http_port, doc, "application/json; charset=utf-8")
        assert (r.status_code, r.headers["content-type"], r.content) == (200, "application/json", b"{}")
        assert (
            _post(c.http_port, gzip.compress(doc2), "application/json", **{"Content-Encoding": "gzip"}).status_code
            == 200
        )
        r = _post(c.http_port, zlib.compress(proto), **{"Content-Encoding": "deflate"})
        assert (r.status_code, r.headers["content-type"], r.content) == (200, "application/x-protobuf", b"")
    assert rows(archive_path, "SELECT format, count(*) FROM ingest_batches GROUP BY 1 ORDER BY 1") == [
        ("otlp-json", 2),
        ("otlp-proto", 1),
    ]
    assert rows(archive_path, "SELECT count(*) FROM requests") == [(9,)]


# -- bad input, duplicates ------------------------------------------------------------------------------------
def test_non_otlp_bodies_get_400_and_change_nothing(archive_path):
    proto, _ = _bodies()
    with Collector(archive_path, grpc_port=0, http_port=0) as c:
        assert _post(c.http_port, proto).status_code == 200
        _wait_for(lambda: c.stats.spans)  # acknowledged from the spool: its spans count once it has landed
        before = c.stats
        r = _post(c.http_port, b'{"hello": "world"}', "application/json")
        assert r.status_code == 400 and r.headers["content-type"] == "application/json"
        assert "resourceSpans" in r.json()["message"] and r.json()["code"] == 3
        r = _post(c.http_port, b"\xff\xff\xff\xff not protobuf")
        status = status_pb2.Status.FromString(r.content)
        assert r.status_code == 400 and status.code == 3 and "not an OTLP protobuf" in status.message
        assert _post(c.http_port, b"x", "text/plain").status_code == 415
        assert _post(c.http_port, gzip.compress(proto)[:-9], **{"Content-Encoding": "gzip"}).status_code == 400
        assert _post(c.http_port, proto, **{"Content-Encoding": "br"}).status_code == 415
        # a trace export sent to the metrics endpoint is not a metrics export
        assert (
            httpx.post(
                f"http://127.0.0.1:{c.http_port}/v1/metrics",
                content=proto,
                headers={"Content-Type": "application/x-protobuf"},
            ).status_code
            == 400
        )
        assert httpx.get(f"http://127.0.0.1:{c.http_port}/v1/traces").status_code == 405
        with grpc.insecure_channel(f"127.0.0.1:{c.grpc_port}") as ch:
            export = ch.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            with pytest.raises(grpc.RpcError) as e:
                export(b"\xff\xff\xff\xff", timeout=10)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert c.stats.batches_rejected == 4  # three bad trace bodies and the trace export sent to /v1/metrics
        assert c.stats.spans == before.spans
    assert _counts(archive_path) == (15, 3, 1)


def test_too_large_bodies_get_413(archive_path):
    big = b"\0" * 5000
    with Collector(archive_path, grpc_port=None, http_port=0, max_message_bytes=4096) as c:
        assert _post(c.http_port, big).status_code == 413
        assert _post(c.http_port, gzip.compress(big), **{"Content-Encoding": "gzip"}).status_code == 413
    assert _counts(archive_path) == (0, 0, 0)


def test_the_same_body_twice_lands_once(archive_path):
    proto, doc = _bodies()
    with Collector(archive_path, grpc_port=0, http_port=0) as c:
        assert [_post(c.http_port, proto).status_code for _ in range(2)] == [200, 200]
        with grpc.insecure_channel(f"127.0.0.1:{c.grpc_port}") as ch:
            assert ch.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")(proto) == b""
        # a retry racing its original: both in one group
        with httpx.Client() as client:
            threads = [
                threading.Thread(
                    target=client.post,
                    args=(f"http://127.0.0.1:{c.http_port}/v1/traces",),
                    kwargs={"content": doc, "headers": {"Content-Type": "application/json"}},
                )
                for _ in range(3)
            ]
            [t.start() for t in threads]
            [t.join() for t in threads]
    stats = c.stats  # once stopped: batches acknowledged on the spool are counted when they land
    assert _counts(archive_path) == (15, 3, 2)
    assert (stats.batches, stats.batches_landed, stats.batches_rejected) == (6, 2, 0)


# -- overload and shutdown ------------------------------------------------------------------------------------
def _post_in_thread(port: int, body: bytes, results: list) -> threading.Thread:
    t = threading.Thread(target=lambda: results.append(_post(port, body)))
    t.start()
    return t


def _wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def through_ingest(monkeypatch):
    """Every batch answered after `Archive.ingest` (the path these tests hold up or break), none from the spool
    alone."""
    from budgetscope.ingest.lander import Lander

    monkeypatch.setattr(Lander, "accept", lambda self, batches: [False] * len(batches))


def test_overload_answers_429_and_resource_exhausted_with_retry_delay(archive_path, through_ingest):
    proto, _ = _bodies()
    other, _ = _bodies()
    size = len(proto)
    # The queue holds one body; the writer is held at a gate so that the first request stays pending.
    with Collector(
        archive_path,
        grpc_port=0,
        http_port=0,
        max_pending_bytes=size + 100,
        max_message_bytes=size + 100,
        linger_s=0,
        retry_after_s=3,
    ) as c:
        gate = threading.Event()
        archive = c._writer._archive
        ingest = archive.ingest
        archive.ingest = lambda batches, **kw: gate.wait(30) and ingest(batches, **kw)
        first: list = []
        t = _post_in_thread(c.http_port, proto, first)
        _wait_for(lambda: c._queue.pending_bytes > 0)
        r = _post(c.http_port, other)
        assert (r.status_code, r.headers["retry-after"]) == (429, "3")
        assert status_pb2.Status.FromString(r.content).code == 8  # RESOURCE_EXHAUSTED
        with grpc.insecure_channel(f"127.0.0.1:{c.grpc_port}") as ch:
            export = ch.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            with pytest.raises(grpc.RpcError) as e:
                export(other, timeout=10)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        trailers = dict(e.value.trailing_metadata())
        info = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
        assert info.retry_delay.seconds == 3
        status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
        assert status.code == 8 and status.details[0].Is(error_details_pb2.RetryInfo.DESCRIPTOR)
        gate.set()
        t.join()
        assert first[0].status_code == 200
        assert c.stats.refused_busy == 2
        # once answered, the bytes are free again
        assert _post(c.http_port, other).status_code == 200
        assert c._queue.pending_bytes == 0
    assert _counts(archive_path)[2] == 2


def test_stop_lands_what_was_accepted_then_refuses(archive_path):
    bodies = [_bodies()[0] for _ in range(4)]
    c = Collector(archive_path, grpc_port=0, http_port=0, linger_s=30.0, linger_gap_s=30.0)
    c.start()
    results: list = []
    threads = [_post_in_thread(c.http_port, b, results) for b in bodies]
    # queued, not only reserved: a body still being read when the queue closes is refused (503), by design
    _wait_for(lambda: len(c._queue._items) == len(bodies))
    t0 = time.monotonic()
    stats = c.stop()
    assert time.monotonic() - t0 < 10  # the linger does not hold up the drain
    [t.join() for t in threads]
    assert [r.status_code for r in results] == [200] * 4
    assert stats.batches_landed == 4 and stats.spans == 60
    assert _counts(archive_path) == (60, 12, 4)
    with pytest.raises(httpx.ConnectError):
        _post(c.http_port, bodies[0])


# -- start-up errors ------------------------------------------------------------------------------------------
def test_a_port_in_use_is_a_one_line_error(archive_path):
    with Collector(archive_path, grpc_port=0, http_port=0) as c:
        for ports in ({"grpc_port": c.grpc_port, "http_port": 0}, {"grpc_port": 0, "http_port": c.http_port}):
            other = Collector(archive_path.with_name("other.duckdb"), **ports)
            with pytest.raises(CollectorError, match="cannot listen on 127.0.0.1:") as e:
                other.start()
            assert "\n" not in str(e.value)


def test_a_bad_archive_is_a_one_line_error(tmp_path):
    (tmp_path / "not-an-archive.duckdb").write_text("hello")
    for path, message in (
        (tmp_path, "is a folder with other files in it, not a budgetscope archive"),
        (tmp_path / "nope" / "a.duckdb", "does not exist"),
        (tmp_path / "nope" / "a", "does not exist"),
        (tmp_path / "not-an-archive.duckdb", "not a DuckDB archive"),
    ):
        with pytest.raises(CollectorError, match=message):
            Collector(path, grpc_port=0, http_port=0).start()


def test_an_archive_failure_answers_503_and_spares_the_rest_of_its_group(archive_path, monkeypatch, through_ingest):
    from budgetscope.archive.directory import DirectoryArchive as Archive

    (good, _), (poison, _) = _bodies(), _bodies()
    ingest = Archive.ingest

    def failing_ingest(self, batches, progress=None, **kw):
        batches = list(batches)
        if any(b.payload == poison for b in batches):
            raise RuntimeError("disk on fire")
        return ingest(self, batches, progress, **kw)

    monkeypatch.setattr(Archive, "ingest", failing_ingest)
    with Collector(archive_path, grpc_port=None, http_port=0, linger_s=1.0, linger_gap_s=1.0) as c:
        results: list = []
        threads = [_post_in_thread(c.http_port, b, results) for b in (good, poison)]
        [t.join() for t in threads]
        by_body = {r.request.content: r for r in results}
        assert by_body[good].status_code == 200
        assert (by_body[poison].status_code, by_body[poison].headers["retry-after"]) == (503, "1")
        assert "the archive failed" in status_pb2.Status.FromString(by_body[poison].content).message
        assert c.stats.batches_failed == 1 and c.error is None
        assert c.stats.ingests == 3  # the group of two failed, then each alone
        assert _post(c.http_port, _bodies()[0]).status_code == 200  # the writer carries on
    assert _counts(archive_path) == (30, 6, 2)


@pytest.mark.parametrize("limit", ["spans", "bytes"])
def test_acknowledged_batches_waiting_to_land_are_bounded_and_push_back(archive_path, monkeypatch, limit):
    """Batches answered from the spool wait in memory, as decoded columns, until the lander lands them: past
    max_unlanded_spans spans or max_unlanded_bytes of columns, nothing more is taken from the queue, which fills,
    and receivers answer busy."""
    from budgetscope.ingest import otlp_fast
    from budgetscope.ingest.lander import Lander

    gate = threading.Event()
    land = Lander.land_deferred
    bodies = [_bodies()[0] for _ in range(4)]
    size = max(map(len, bodies))
    (table,) = otlp_fast.decode_proto(bodies[:1], [0], otlp_fast.span_set())[:1]
    # one batch's spans or columns pass; the second's reach the limit, the other one far away
    limits = {
        "spans": {"max_unlanded_spans": table.num_rows + 1},
        "bytes": {"max_unlanded_bytes": table.nbytes + 1},
    }[limit]
    with Collector(
        archive_path,
        grpc_port=None,
        http_port=0,
        max_pending_bytes=size + 100,
        max_message_bytes=size + 100,
        linger_s=0,
        **limits,
    ) as c:
        monkeypatch.setattr(Lander, "land_deferred", lambda self: gate.wait(30) and land(self))
        assert [_post(c.http_port, b).status_code for b in bodies[:2]] == [200, 200]  # answered from the spool
        third: list = []
        t = _post_in_thread(c.http_port, bodies[2], third)
        _wait_for(lambda: c._queue.pending_bytes > 0)
        time.sleep(0.3)
        assert not third  # queued: the acceptor waits for the lander
        assert _post(c.http_port, bodies[3]).status_code == 429
        gate.set()
        t.join()
        assert third[0].status_code == 200
    assert _counts(archive_path) == (45, 9, 3)


def test_the_lander_is_asked_to_land_once_until_it_does(tmp_path):
    """One landing takes every accepted batch: asking again while a request to land waits (after each group, and
    every 0.1 s while the acceptor waits on the lander) would leave a row of small landings behind a derivation."""
    from budgetscope.collector.pending import PendingQueue
    from budgetscope.collector.writer import _LAND, ArchiveWriter

    w = ArchiveWriter(tmp_path / "a", PendingQueue(1 << 20), linger_s=0, max_group_bytes=1 << 20, gap_s=0)
    for _ in range(5):
        w._ask_to_land()
    assert w._slow.qsize() == 1 and w._slow.get_nowait() is _LAND
    w._land_queued = False  # what the lander does as it takes it, before the landing takes the batches
    w._ask_to_land()
    assert w._slow.qsize() == 1


def test_a_spool_that_fails_falls_back_to_ingest_and_loses_nothing(archive_path, monkeypatch):
    from budgetscope.archive.spool import Spool

    real = Spool.append
    calls = []

    def flaky(self, batches, **kw):  # a fake: the first append fails as a full disk would
        batches = list(batches)
        calls.append(len(batches))
        if len(calls) == 1:
            raise OSError("no space left on device")
        return real(self, batches, **kw)

    monkeypatch.setattr(Spool, "append", flaky)
    (proto, _), (_, doc) = _bodies(), _bodies()
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        assert _post(c.http_port, doc, "application/json").status_code == 200
        assert _post(c.http_port, proto).status_code == 200
    assert calls[0] == 1 and len(calls) >= 2  # the first try failed; ingest spooled it, then the second
    assert _counts(archive_path) == (30, 6, 2)


def test_status_and_retry_info_decode_with_the_googleapis_protos():
    from budgetscope.collector import status as st

    status = status_pb2.Status.FromString(st.status_proto(st.UNAVAILABLE, "shutting down ✓", retry_after_s=1.5))
    info = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info)
    assert (status.code, status.message, info.retry_delay.seconds, info.retry_delay.nanos) == (
        14,
        "shutting down ✓",
        1,
        500_000_000,
    )
    assert status_pb2.Status.FromString(st.status_proto(st.INVALID_ARGUMENT, "bad")).details == []
    assert orjson.loads(st.status_json(st.RESOURCE_EXHAUSTED, "busy", 2)) == {
        "code": 8,
        "message": "busy",
        "details": [{"@type": st.RETRY_INFO_TYPE, "retryDelay": "2s"}],
    }


@pytest.mark.parametrize(
    "body, reason",
    [
        (
            b'{"resourceSpans":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "not an OTLP trace export: JSON nested deeper than 1,024 levels (depth limit exceeded: line 1 column 1042 "
            "(char 1041))",
        ),
        (b'{"resourceSpans":[[[]]]}', "not an OTLP trace export: resourceSpans[0] is a JSON array, not an object"),
        (
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[[{"spanId":"x"}]]}]}]}',
            "not an OTLP trace export: spans[0] is a JSON array, not an object",
        ),
    ],
)
def test_nested_arrays_where_messages_belong_get_400_and_land_nothing(archive_path, body, reason):
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        r = _post(c.http_port, body, "application/json")
        assert (r.status_code, r.json()) == (400, {"code": 3, "message": reason})
        assert _post(c.http_port, b'{"resourceSpans":[]}', "application/json").status_code == 200  # empty: fine
    assert (c.stats.batches_rejected, c.stats.batches_landed) == (1, 1)
    assert _counts(archive_path) == (0, 0, 1)


def test_metrics_endpoint_serves_the_collectors_own_figures(archive_path):
    """GET /metrics on the OTLP/HTTP port: Prometheus text that Prometheus's own parser reads, with the counts."""
    parser = pytest.importorskip("prometheus_client.parser")
    proto, _ = _bodies(3)
    p = "budgetscope_collector_"

    def scrape(port: int) -> dict:
        r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in parser.text_string_to_metric_families(r.text)
            for s in fam.samples
        }

    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        assert _post(c.http_port, proto).status_code == 200
        assert _post(c.http_port, b"not otlp").status_code == 400
        deadline = time.monotonic() + 20  # an acknowledged batch lands with the next commit (about a second)
        while (samples := scrape(c.http_port))[(f"{p}batches_landed_total", ())] < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
    assert samples[(f"{p}batches_received_total", ())] == 2
    assert samples[(f"{p}batches_landed_total", ())] == 1 and samples[(f"{p}batches_rejected_total", ())] == 1
    assert samples[(f"{p}spans_landed_total", ())] == 15
    assert samples[(f"{p}requests_refused_total", (("reason", "busy"),))] == 0
    assert samples[(f"{p}pending_bytes", ())] == 0 and samples[(f"{p}pending_bytes_limit", ())] == 64 * 2**20
    assert 0 <= samples[(f"{p}commit_age_seconds", ())] < 60


def test_metrics_endpoint_needs_the_token_when_one_is_set(archive_path):
    with Collector(archive_path, grpc_port=None, http_port=0, auth_token="s3cret") as c:
        assert httpx.get(f"http://127.0.0.1:{c.http_port}/metrics", timeout=10).status_code == 401
        ok = httpx.get(
            f"http://127.0.0.1:{c.http_port}/metrics", headers={"Authorization": "Bearer s3cret"}, timeout=10
        )
    assert ok.status_code == 200 and "budgetscope_collector_batches_received_total 0" in ok.text
