"""TGI: its spans (Duration Debug text fields, `queued`/`infer`/`send_generation`) and its `x-*-time` headers.

Wire formats as TGI writes them: router/src/server.rs (handler span fields, headers), backends/v3/src/queue.rs
(`queued`, `infer`), backends/v3/src/backend.rs (`send_generation`); huggingface/text-generation-inference at
db931fcf42da018a3657580c64bf2720f167f9ab.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from budgetscope.sources.importers import KIND_CLIENT, KIND_SERVER, document, span
from conftest import rows
from server_traces import rust_duration

T0 = 1_800_000_000_000_000_000
MS = 1_000_000
SERVICE = "text-generation-inference.router"


@pytest.mark.parametrize(
    "text, ms",
    [
        ("12.3ms", 12.3),
        ("1.2s", 1200.0),
        ("850µs", 0.85),
        ("120ns", 0.00012),
        ("0ns", 0.0),
        ("3.000001s", 3000.001),
        ("soon", None),
    ],
)
def test_rust_duration_debug_text(text, ms):
    import duckdb

    from budgetscope.derive.tgi import duration_ms

    (got,) = duckdb.execute(f"SELECT {duration_ms('x')} FROM (SELECT ?::VARCHAR AS x)", [text]).fetchone()
    assert got == (None if ms is None else pytest.approx(ms))


def _tgi_trace(tid: str, client_sid: str | None, *, tokens: int = 5, fields: bool = True, k: int = 0) -> list[dict]:
    # handler span → async_stream → Infer::generate_stream (same name) → schedule → queued, infer (INTERNAL kind:
    # tracing-opentelemetry sets no other kind without an `otel.kind` field)
    h, w, i, s = (f"{k:08x}000000{x}" for x in ("a1", "a5", "a2", "a6"))
    attrs = (
        {
            "validation_time": "2.5ms",
            "queue_time": "20ms",
            "inference_time": "77.5ms",
            "total_time": "100ms",
            "time_per_token": "15.5ms",
            "seed": "None",
        }
        if fields
        else {}
    )
    out = [
        span(tid, h, "generate_stream", 1, T0, T0 + 100 * MS, attrs, parent_span_id=client_sid),
        span(tid, w, "async_stream", 1, T0 + MS // 2, T0 + 99 * MS, {}, parent_span_id=h),
        span(tid, i, "generate_stream", 1, T0 + 1 * MS, T0 + 99 * MS, {}, parent_span_id=w),
        span(tid, s, "schedule", 1, T0 + 2 * MS, T0 + 99 * MS, {}, parent_span_id=i),
        span(tid, f"{k:08x}000000a3", "queued", 1, T0 + int(2.5 * MS), T0 + int(22.5 * MS), {}, parent_span_id=s),
        span(tid, f"{k:08x}000000a4", "infer", 1, T0 + int(22.5 * MS), T0 + 98 * MS, {}, parent_span_id=s),
    ]
    for n in range(tokens):  # first token at 52.5 ms, then one every 10 ms
        t = T0 + int((52.5 + 10 * n) * MS)
        out.append(
            span(
                tid,
                f"{k:08x}{0xB0 + n:08x}",
                "send_generation",
                1,
                t,
                t + 100_000,
                {"generation": "Generation { .. }"},
                parent_span_id=f"{k:08x}000000a4",
            )
        )
    return out


def test_tgi_spans_map_to_stages(archive_path, ingest_text):
    tid = f"{1:032x}"
    ingest_text(archive_path, document(SERVICE, _tgi_trace(tid, None)).decode())
    (r,) = rows(
        archive_path,
        """SELECT source, frontend_ms, queue_ms, prefill_ms, decode_ms, postprocess_ms, ttft_ms,
        e2e_ms, unaccounted_ms, ttft_unaccounted_ms, output_tokens, queue_entries FROM requests""",
    )
    assert r[0] == "tgi"
    assert r[1:8] == pytest.approx((2.5, 20.0, 30.0, 40.0, 100 - 92.6, 52.5, 100.0))
    assert r[8] == pytest.approx(100 - 2.5 - 20 - 30 - 40 - 7.4) and r[9] == pytest.approx(0.0)
    assert r[10:] == (5, 1)
    assert {s for (s,) in rows(archive_path, "SELECT DISTINCT source FROM spans")} == {"tgi"}


def test_tgi_without_send_generation_spans_leaves_prefill_and_decode_unknown(archive_path, ingest_text):
    ingest_text(archive_path, document(SERVICE, _tgi_trace(f"{2:032x}", None, tokens=0, fields=False)).decode())
    (r,) = rows(
        archive_path,
        "SELECT frontend_ms, queue_ms, prefill_ms, decode_ms, ttft_ms, e2e_ms, unaccounted_ms FROM requests",
    )
    assert r[:2] == pytest.approx((2.5, 20.0))  # from the spans when the fields are missing
    assert r[2:5] == (None, None, None) and r[5:] == pytest.approx((100.0, 77.5))


def test_tgi_spans_join_the_client_span_and_win_over_headers(archive_path, ingest_text):
    tid, csid = f"{3:032x}", f"{3:016x}"
    c = span(
        tid,
        csid,
        "llm.client.request",
        KIND_CLIENT,
        T0 - 5 * MS,
        T0 + 106 * MS,
        {
            "budgetscope.client.first_token_unix_nano": T0 + 55 * MS,
            "http.response.status_code": 200,
            "http.response.header.x-total-time": ["100"],
        },
    )
    ingest_text(archive_path, document("loadgen", [c]).decode())
    ingest_text(archive_path, document(SERVICE, _tgi_trace(tid, csid)).decode())
    assert rows(archive_path, "SELECT source, network_ms, ttft_network_ms FROM requests") == [
        ("tgi", pytest.approx(11.0), pytest.approx(7.5))
    ]


def test_tgi_requests_sharing_a_trace_are_told_apart(archive_path, ingest_text):
    """An application span calling TGI twice (one trace, one traceparent parent): two rows, each with its own
    stages, and neither paired with the other's SERVER span."""
    tid, app = f"{4:032x}", f"{4:016x}"
    root = span(tid, app, "agent.step", KIND_SERVER, T0 - MS, T0 + 200 * MS, {})
    two = _tgi_trace(tid, app, tokens=5, k=1) + _tgi_trace(tid, app, tokens=3, k=2)
    http = [
        span(
            tid,
            f"{k:08x}000000ff",
            "POST /generate_stream",
            KIND_SERVER,
            T0 - MS // 10,
            T0 + 101 * MS,
            {"http.route": "/generate_stream"},
            parent_span_id=app,
        )
        for k in (1, 2)
    ]
    ingest_text(archive_path, document("app", [root]).decode())
    ingest_text(archive_path, document(SERVICE, two + http).decode())
    got = rows(archive_path, "SELECT request_id, output_tokens, decode_ms, e2e_ms FROM requests ORDER BY 1")
    assert got == [
        ("00000001000000a1", 5, pytest.approx(40.0), pytest.approx(100.0)),
        ("00000002000000a1", 3, pytest.approx(20.0), pytest.approx(100.0)),
    ]


@pytest.mark.parametrize(
    "ns, text",
    [
        (2_500_000, "2.5ms"),
        (898_000, "898µs"),
        (20_057_001, "20.057001ms"),
        (1_200_000_000, "1.2s"),
        (120, "120ns"),
        (3_000_000, "3ms"),
    ],
)
def test_rust_duration_text_of_the_generator(ns, text):
    assert rust_duration(ns) == text


def _tgi_request(rng, k: int, tid: str, parent: str | None, t0: int) -> tuple[list[dict], dict]:
    """One TGI request of a random shape (streamed or not, 1-12 tokens), as db931fc's router nests its spans, and
    the stages it must give (ms)."""
    us = 1_000
    stream = rng.random() < 0.6
    n = rng.randint(1, 12)
    v, q, pre, itl, post = (
        rng.randint(200, 3_000),
        rng.randint(0, 50_000),
        rng.randint(5_000, 60_000),
        rng.randint(5_000, 30_000),
        rng.randint(100, 2_000),
    )
    sid = iter(f"{k:06x}{j:010x}" for j in range(1, 100))
    first = v + q + pre
    last = first + (n - 1) * itl
    end = last + 30 + post
    h = next(sid)
    name = rng.choice(("generate_stream", "chat_completions")) if stream else rng.choice(("generate", "completions"))
    fields = {"validation_time": rust_duration(v * us), "queue_time": rust_duration(q * us), "seed": "None"}
    out = [span(tid, h, name, 1, t0, t0 + end * us, fields, parent_span_id=parent)]
    wrapper, inner = next(sid), next(sid)
    out.append(
        span(
            tid,
            wrapper,
            "async_stream" if stream else "generate",
            1,
            t0 + 10 * us,
            t0 + (last + 50) * us,
            {},
            parent_span_id=h,
        )
    )
    out.append(span(tid, inner, "generate_stream", 1, t0 + 15 * us, t0 + (last + 45) * us, {}, parent_span_id=wrapper))
    sched = next(sid)
    out.append(span(tid, sched, "schedule", 1, t0 + v * us, t0 + (last + 40) * us, {}, parent_span_id=inner))
    out.append(span(tid, next(sid), "queued", 1, t0 + (v + 20) * us, t0 + (v + q) * us, {}, parent_span_id=sched))
    for j in range(n):
        inf = next(sid)
        s0 = t0 + (v + q if j == 0 else first + (j - 1) * itl + 200) * us
        out.append(span(tid, inf, "infer", 1, s0, t0 + (first + j * itl + 100) * us, {}, parent_span_id=sched))
        g0 = t0 + (first + j * itl) * us
        out.append(span(tid, next(sid), "send_generation", 1, g0, g0 + 30 * us, {}, parent_span_id=inf))
    return out, {
        "request_id": h,
        "frontend_ms": v / 1e3,
        "queue_ms": q / 1e3,
        "prefill_ms": pre / 1e3,
        "decode_ms": (last - first) / 1e3,
        "postprocess_ms": post / 1e3,
        "e2e_ms": end / 1e3,
        "ttft_ms": first / 1e3,
        "output_tokens": n,
    }


@pytest.mark.parametrize("seed", [23, 24])
def test_tgi_concurrent_mixed_requests_each_get_their_own_stages(seed, archive_path, ingest_text):
    """Forty overlapping requests of random shapes, half of them sharing one application trace (traceparent from
    one parent span): one row each, every stage its own to the microsecond."""
    import random

    rng = random.Random(seed)
    app_tid, app = f"{0xA99:032x}", f"{0xA99:016x}"
    spans, want = [span(app_tid, app, "agent.run", KIND_SERVER, T0 - MS, T0 + 10_000 * MS, {})], []
    for k in range(40):
        shared = rng.random() < 0.5
        tid = app_tid if shared else f"{0x7000 + k:032x}"
        got, w = _tgi_request(rng, k, tid, app if shared else None, T0 + rng.randint(0, 200) * MS)
        spans += got
        want.append(w)
    ingest_text(archive_path, document("app", spans[:1]).decode())
    ingest_text(archive_path, document(SERVICE, spans[1:]).decode())
    keys = list(want[0])
    got = {r[0]: dict(zip(keys, r)) for r in rows(archive_path, f"SELECT {', '.join(keys)} FROM requests")}
    assert len(got) == len(want)
    for w in want:
        assert got[w["request_id"]] == pytest.approx(w, abs=1e-3)


class _FakeTGI(BaseHTTPRequestHandler):
    """Answers /v1/completions like TGI does without streaming: JSON body and its timing headers."""

    def do_GET(self):
        self._send({"object": "list", "data": [{"id": "tgi-model"}]}, {})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        assert body["stream"] is False
        self._send(
            {
                "choices": [{"text": "hello", "index": 0, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
            },
            {
                "x-compute-type": "cpu",
                "x-compute-time": "0.012",
                "x-total-time": "12",
                "x-validation-time": "1",
                "x-queue-time": "4",
                "x-inference-time": "7",
                "x-time-per-token": "2",
                "x-prompt-tokens": "7",
                "x-generated-tokens": "3",
            },
        )

    def _send(self, obj, headers):
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_load_generator_keeps_tgi_headers_and_they_feed_stages(tmp_path, archive_path):
    from click.testing import CliRunner

    from budgetscope.cli import main
    from budgetscope.ingest.files import read_batches
    from budgetscope.opener import Archive

    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeTGI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spans = tmp_path / "client.jsonl"
        r = CliRunner().invoke(
            main,
            [
                "load",
                f"http://127.0.0.1:{server.server_port}",
                "--rate",
                "50",
                "--requests",
                "5",
                "--no-stream",
                "--spans",
                f"jsonl:{spans}",
            ],
        )
        assert r.exit_code == 0, r.output
    finally:
        server.shutdown()
    with Archive(archive_path) as a:
        a.ingest(read_batches(spans))
    got = rows(
        archive_path,
        """SELECT source, frontend_ms, queue_ms, e2e_ms, unaccounted_ms, input_tokens,
        output_tokens, prefill_ms, decode_ms, ttft_ms, network_ms, client_e2e_ms FROM requests""",
    )
    assert len(got) == 5
    for src, fe, q, e2e, unacc, inp, out, prefill, decode, ttft, network, client_e2e in got:
        assert (src, fe, q, e2e, unacc, inp, out) == ("tgi", 1, 4, 12, 7, 7, 3)  # inference: not split
        assert (prefill, decode, ttft) == (None, None, None)
        assert network == pytest.approx(client_e2e - 12)
