"""The OTLP/HTTP receiver against hostile or broken senders: compression bombs, absurd lengths, connections that
dribble or never finish, more connections than its cap. Nothing of them may cost a thread, unbounded memory, or
the service of a real exporter. The slow, full-size versions (2 GiB bomb, 400 dribblers, RSS of the process)
are `benchmarks/fault_collector_abuse.py` (`make faults`)."""

from __future__ import annotations

import gzip
import socket
import threading
import time

import httpx
import pytest

from budgetscope.collector import Collector
from budgetscope.collector import http_receiver as hr

pytest.importorskip("grpc")
from test_collector import _bodies, _clean_otlp_env, _wait_for  # noqa: E402,F401 - the fixture is used by name


def _raw(port: int, data: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(data)
    return s


def _answer(s: socket.socket) -> bytes:
    out = b""
    while b"\r\n\r\n" not in out:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    return out


def bomb(inflated_mib: int) -> bytes:
    """A gzip body of `inflated_mib` MiB of zeros, as repeated 16 MiB members (about 1,000 times smaller)."""
    member = gzip.compress(bytes(16 << 20), compresslevel=9)
    return member * (inflated_mib // 16)


def test_a_compression_bomb_gets_413_and_holds_no_memory(archive_path):
    body = bomb(256)
    assert len(body) < 400_000
    with Collector(archive_path, grpc_port=None, http_port=0, max_message_bytes=4 << 20) as c:
        r = httpx.post(f"http://127.0.0.1:{c.http_port}/v1/traces", content=body, timeout=30,
                       headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
        assert r.status_code == 413 and "decompressed body exceeds 4,194,304 bytes" in r.text
        _wait_for(lambda: c._queue.pending_bytes == 0)  # released just after the answer went
        assert c.stats.batches == 0


def test_an_absurd_content_length_gets_413_before_any_body(archive_path):
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        s = _raw(c.http_port, b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 99999999999\r\n\r\n")
        head = _answer(s)
        s.close()
        assert head.startswith(b"HTTP/1.1 413 ") and b"Connection: close" in head
        assert c._queue.pending_bytes == 0


def test_dribbling_connections_cost_no_thread_and_do_not_delay_a_real_export(archive_path, monkeypatch):
    """100 connections each sending a header byte now and then: the thread count does not move, a real export is
    answered at once, and each dribbler is cut once its headers are HEADER_TIMEOUT_S late."""
    monkeypatch.setattr(hr, "HEADER_TIMEOUT_S", 2.0)
    proto, _ = _bodies()
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        threads_before = threading.active_count()
        dribblers = [_raw(c.http_port, b"P") for _ in range(100)]
        _wait_for(lambda: c._receivers[0].num_connections == 100)
        for s in dribblers:
            s.sendall(b"O")
        t0 = time.perf_counter()
        r = httpx.post(f"http://127.0.0.1:{c.http_port}/v1/traces", content=proto, timeout=10,
                       headers={"Content-Type": "application/x-protobuf"})
        answered_s = time.perf_counter() - t0
        assert r.status_code == 200 and answered_s < 2.0, answered_s
        assert threading.active_count() <= threads_before + 1  # + at most the first inflate/other pool thread
        _wait_for(lambda: c._receivers[0].num_connections == 0, timeout_s=8)  # cut: headers too slow
        assert c._receivers[0].num_timed_out == 100
        for s in dribblers:
            assert s.recv(10) == b""  # closed by the collector
            s.close()


def test_connections_past_the_cap_get_503_and_the_cap_frees_up(archive_path):
    proto, _ = _bodies()
    with Collector(archive_path, grpc_port=None, http_port=0, max_connections=10) as c:
        held = [_raw(c.http_port, b"") for _ in range(10)]
        _wait_for(lambda: c._receivers[0].num_connections == 10)
        extra = _raw(c.http_port, b"")
        head = _answer(extra)
        assert head.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1" in head
        extra.close()
        assert c._receivers[0].num_refused_connections == 1
        for s in held:
            s.close()
        _wait_for(lambda: c._receivers[0].num_connections == 0)
        r = httpx.post(f"http://127.0.0.1:{c.http_port}/v1/traces", content=proto, timeout=10,
                       headers={"Content-Type": "application/x-protobuf"})
        assert r.status_code == 200


def test_oversized_headers_and_garbage_get_an_answer_and_a_close(archive_path):
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        s = _raw(c.http_port, b"POST /v1/traces HTTP/1.1\r\nX-Big: " + b"a" * (hr.MAX_HEADER_BYTES + 10) + b"\r\n\r\n")
        assert _answer(s).startswith(b"HTTP/1.1 431 ")
        s.close()
        s = _raw(c.http_port, b"\x16\x03\x01 hello, not http\r\n\r\n")
        assert _answer(s).startswith(b"HTTP/1.1 400 ")
        s.close()
        s = _raw(c.http_port, b"POST /v1/traces HTTP/1.1\r\nContent-Type: application/json\r\n"
                              b"Transfer-Encoding: chunked\r\n\r\nzz\r\n")
        assert _answer(s).startswith(b"HTTP/1.1 400 ")
        s.close()
        _wait_for(lambda: c._queue.pending_bytes == 0)
        assert c.stats.batches == 0


def test_keep_alive_pipelined_and_chunked_requests_are_each_answered(archive_path):
    (a, _), (b, _) = _bodies(), _bodies()
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        chunked = head + b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(
            b"%x\r\n%s\r\n" % (len(p), p) for p in (b[:100], b[100:])) + b"0\r\n\r\n"
        s = _raw(c.http_port, head + b"Content-Length: %d\r\n\r\n" % len(a) + a + chunked)
        first = _answer(s)
        second = first.split(b"\r\n\r\n", 1)[1] or _answer(s)
        s.close()
        assert first.startswith(b"HTTP/1.1 200 ") and b"HTTP/1.1 200 " in second
    assert c.stats.batches == 2 and c.stats.spans == 30
