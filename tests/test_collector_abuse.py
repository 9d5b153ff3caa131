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

from budgetscope.collector import Collector, pending
from budgetscope.collector import http_receiver as hr
from budgetscope.collector.pending import Outcome, PendingQueue

grpc = pytest.importorskip("grpc")
from test_collector import _bodies, _clean_otlp_env, _wait_for  # noqa: E402,F401 - the fixture is used by name

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


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
        r = httpx.post(
            f"http://127.0.0.1:{c.http_port}/v1/traces",
            content=body,
            timeout=30,
            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
        )
        assert r.status_code == 413 and "decompressed body exceeds 4,194,304 bytes" in r.text
        _wait_for(lambda: c._queue.pending_bytes == 0)  # released just after the answer went
        assert c.stats.batches == 0


def test_an_absurd_content_length_gets_413_before_any_body(archive_path):
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        s = _raw(
            c.http_port,
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 99999999999\r\n\r\n",
        )
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
        r = httpx.post(
            f"http://127.0.0.1:{c.http_port}/v1/traces",
            content=proto,
            timeout=10,
            headers={"Content-Type": "application/x-protobuf"},
        )
        answered_s = time.perf_counter() - t0
        assert r.status_code == 200 and answered_s < 2.0, answered_s
        assert threading.active_count() <= threads_before + 1  # + at most the first inflate/other pool thread
        _wait_for(lambda: c._receivers[0].num_connections == 0, timeout_s=8)  # cut: headers too slow
        assert c._receivers[0].num_timed_out == 100
        for s in dribblers:
            assert s.recv(10) == b""  # closed by the collector
            s.close()


def test_a_silent_connection_gives_its_slot_to_a_new_one(archive_path):
    """All slots held by connections that sent nothing: a new connection takes the oldest silent one's slot and
    its export is served; the silent ones are cut HEADER_TIMEOUT_S after they connected."""
    proto, _ = _bodies()
    with Collector(archive_path, grpc_port=None, http_port=0, max_connections=10) as c:
        receiver = c._receivers[0]
        held = [_raw(c.http_port, b"") for _ in range(10)]
        _wait_for(lambda: receiver.num_connections == 10)
        t0 = time.perf_counter()
        r = _post(c.http_port, proto)
        assert r.status_code == 200 and time.perf_counter() - t0 < 1.0
        assert receiver.num_evicted_connections == 1 and receiver.num_refused_connections == 0
        assert held[0].recv(10) == b""  # the oldest silent connection lost its slot
        for s in held:
            s.close()


def test_silent_connections_are_cut_soon_after_they_connect(archive_path, monkeypatch):
    monkeypatch.setattr(hr, "HEADER_TIMEOUT_S", 1.0)
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        silent = [_raw(c.http_port, b"") for _ in range(20)]
        _wait_for(lambda: c._receivers[0].num_connections == 20)
        _wait_for(lambda: c._receivers[0].num_connections == 0, timeout_s=4)  # 1 s + the sweeper's second
        assert c._receivers[0].num_timed_out == 20
        for s in silent:
            assert s.recv(10) == b""
            s.close()


def test_connections_past_the_cap_get_503_only_when_every_slot_makes_progress(archive_path, monkeypatch):
    """Slots whose bodies keep arriving are kept: one more connection is answered 503; once they finish, the
    cap frees up."""
    monkeypatch.setattr(hr, "SLOT_STALL_S", 60.0)
    proto, _ = _bodies()
    with Collector(archive_path, grpc_port=None, http_port=0, max_connections=4) as c:
        receiver = c._receivers[0]
        senders = [_raw(c.http_port, _head(len(proto)) + proto[:10]) for _ in range(4)]
        _wait_for(lambda: c._queue.pending_bytes == 40)
        extra = _raw(c.http_port, b"")
        head = _answer(extra)
        assert head.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1" in head
        extra.close()
        assert receiver.num_refused_connections == 1 and receiver.num_evicted_connections == 0
        for s in senders:
            s.sendall(proto[10:])
            assert _answer(s).startswith(b"HTTP/1.1 200 ")
            s.close()
        _wait_for(lambda: receiver.num_connections == 0)
        assert _post(c.http_port, proto).status_code == 200


def test_a_declared_body_that_never_comes_holds_no_budget(archive_path, monkeypatch):
    """Connections declaring a body of `max_message_bytes` and sending nothing reserve nothing: HTTP and gRPC
    exports are served at once, and the connections are cut BODY_STALL_S later."""
    monkeypatch.setattr(hr, "BODY_STALL_S", 1.0)
    proto, _ = _bodies()
    with Collector(archive_path, grpc_port=0, http_port=0, max_pending_bytes=1 << 20, max_message_bytes=1 << 20) as c:
        idle = [_raw(c.http_port, _head(1 << 20)) for _ in range(4)]
        _wait_for(lambda: c._receivers[1].num_requests == 4)
        assert c._queue.pending_bytes == 0
        _served_within_1s(c, proto)
        _wait_for(lambda: c._receivers[1].num_connections == 0, timeout_s=4)
        assert c._receivers[1].num_timed_out == 4
        for s in idle:
            assert s.recv(10) == b""
            s.close()
        assert c._queue.pending_bytes == 0
    assert c.stats.batches == 2


def test_a_body_reserves_the_bytes_received_and_gives_them_back_when_cut(archive_path, monkeypatch):
    monkeypatch.setattr(hr, "BODY_STALL_S", 1.0)
    with Collector(
        archive_path, grpc_port=None, http_port=0, max_pending_bytes=1 << 20, max_message_bytes=1 << 20
    ) as c:
        s = _raw(c.http_port, _head(1 << 20) + bytes(300_000))
        _wait_for(lambda: c._queue.pending_bytes == 300_000)  # what arrived, not the 1 MiB declared
        assert s.recv(10) == b""  # cut: no byte for BODY_STALL_S
        s.close()
        _wait_for(lambda: c._queue.pending_bytes == 0)
    assert c.stats.batches == 0


def _chunked(data: bytes) -> bytes:
    return _head(None) + b"%x\r\n" % len(data) + data + b"\r\n"


def test_unfinished_chunked_bodies_count_against_the_budget_and_yield_to_real_exports(archive_path, monkeypatch):
    """Chunked bodies are counted as they arrive: past `max_pending_bytes` the next is answered 429 and closed;
    once they stall, a real HTTP and gRPC export takes their bytes (the stalled connections are dropped)."""
    monkeypatch.setattr(pending, "EVICT_STALLED_AFTER_S", 0.3)
    proto, _ = _bodies()
    with Collector(archive_path, grpc_port=0, http_port=0, max_pending_bytes=1 << 20, max_message_bytes=1 << 20) as c:
        held = [_raw(c.http_port, _chunked(bytes(524_000))) for _ in range(2)]
        _wait_for(lambda: c._queue.pending_bytes == 1_048_000)  # 576 bytes left: less than `proto`
        refused = _raw(c.http_port, _chunked(bytes(100_000)))
        head = _answer(refused)  # at once, though the body has not ended: nothing of it is kept or read on
        assert head.startswith(b"HTTP/1.1 429 ") and b"Connection: close" in head
        refused.close()
        assert c._queue.pending_bytes == 1_048_000
        time.sleep(0.4)  # the two bodies are now stalled
        _served_within_1s(c, proto)
        assert c._queue.num_evicted >= 1
        for s in held:
            s.close()
        _wait_for(lambda: c._queue.pending_bytes == 0)


def test_a_refused_body_is_read_on_only_when_little_of_it_is_left(archive_path, monkeypatch):
    """Busy: a body with at most DRAIN_MAX_BYTES left is read to its end (nothing kept) and answered 429 on a
    connection that stays open; a longer one is answered 429 at once and closed."""
    monkeypatch.setattr(pending, "EVICT_STALLED_AFTER_S", 60.0)
    with Collector(
        archive_path, grpc_port=None, http_port=0, max_pending_bytes=4 << 20, max_message_bytes=4 << 20
    ) as c:
        full = _raw(c.http_port, _chunked(bytes((4 << 20) - 1000)))
        _wait_for(lambda: c._queue.pending_bytes == (4 << 20) - 1000)
        small = _raw(c.http_port, (_head(10_000) + bytes(10_000)) * 2)
        answers = b""
        while answers.count(b"HTTP/1.1 ") < 2 and (chunk := small.recv(65536)):
            answers += chunk
        assert answers.count(b"HTTP/1.1 429 ") == 2 and b"Connection: close" not in answers  # one connection
        small.close()
        large = _raw(c.http_port, _head(3 << 20) + bytes(100_000))
        head = _answer(large)
        assert head.startswith(b"HTTP/1.1 429 ") and b"Connection: close" in head
        large.close()
        full.close()
        _wait_for(lambda: c._queue.pending_bytes == 0)
    assert c.stats.batches == 0


def test_stalled_http_bodies_cannot_starve_grpc(archive_path, monkeypatch):
    monkeypatch.setattr(pending, "EVICT_STALLED_AFTER_S", 0.3)
    proto, _ = _bodies()
    with Collector(archive_path, grpc_port=0, http_port=0, max_pending_bytes=1 << 20, max_message_bytes=1 << 20) as c:
        held = _raw(c.http_port, _head(1 << 20) + bytes((1 << 20) - 100))
        _wait_for(lambda: c._queue.pending_bytes == (1 << 20) - 100)
        time.sleep(0.4)
        with grpc.insecure_channel(f"127.0.0.1:{c.grpc_port}") as ch:
            assert ch.unary_unary(EXPORT)(proto, timeout=5) == b""
        assert held.recv(10) == b"" and c._queue.num_evicted == 1
        held.close()
    assert c.stats.batches == 1


def test_a_body_the_collector_has_not_read_is_not_stalled(archive_path, monkeypatch):
    """A starved receiver (its event loop held up: a fake, the loop made to sleep) reads nothing for a while;
    an HTTP body whose next bytes wait in its socket has not stalled, its peer is sending: a whole gRPC request
    that needs the bytes is answered busy, and the HTTP export lands, where it had been evicted and its
    connection cut without an answer (`benchmarks/fault_overload.py` under a CPU quota: 3-91 exports cut)."""
    from budgetscope.collector.http_receiver import OtlpHttpReceiver

    monkeypatch.setattr(pending, "EVICT_STALLED_AFTER_S", 0.3)
    proto, _ = _bodies(80)
    assert len(proto) > 64 << 10  # more than the budget has left while the HTTP body is held
    body = (proto * (1 + (1 << 20) // len(proto)))[: 1 << 20]  # not OTLP that lands: any answer will do
    with Collector(archive_path, grpc_port=0, http_port=0, max_pending_bytes=1 << 20, max_message_bytes=1 << 20) as c:
        (receiver,) = [r for r in c._receivers if isinstance(r, OtlpHttpReceiver)]
        sending = _raw(c.http_port, _head(1 << 20) + body[: -(64 << 10)])
        _wait_for(lambda: c._queue.pending_bytes == (1 << 20) - (64 << 10))
        receiver.call_soon(time.sleep, 1.5)  # the loop reads nothing for 1.5 s
        time.sleep(0.1)
        sending.sendall(body[-(64 << 10) :])  # 64 KiB arrive; nobody reads them
        time.sleep(0.4)  # past the stall time
        with grpc.insecure_channel(f"127.0.0.1:{c.grpc_port}") as ch:
            with pytest.raises(grpc.RpcError) as e:
                ch.unary_unary(EXPORT)(proto, timeout=5)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and c._queue.num_evicted == 0
        head = _answer(sending)
        assert head.startswith(b"HTTP/1.1 "), head  # answered (whatever it says), not cut
        sending.close()


def test_a_body_with_a_trickle_unread_has_still_stalled():
    """The bytes waiting to be read count only when they make a progress's worth (a fake's count)."""
    q = PendingQueue(100, stall_s=0.05)
    waiting = [pending.PROGRESS_BYTES]
    a = q.open_hold(unread=lambda: waiting[0])
    assert q.grow(a, 80) is None
    time.sleep(0.06)
    assert q.reserve(90) is Outcome.BUSY and not a.is_evicted  # its peer sent 32 KiB the receiver has not read
    waiting[0] = pending.PROGRESS_BYTES - a.unmarked - 1  # with what it had read: short of a progress's worth
    assert q.reserve(90) is None and a.is_evicted


def test_only_whole_requests_evict_and_only_bodies_that_stalled():
    q = PendingQueue(100, stall_s=0.05)
    evicted = []
    a = q.open_hold(on_evict=lambda: evicted.append("a"))
    assert q.grow(a, 80) is None
    b = q.open_hold()
    assert q.grow(b, 30, is_last=True) is Outcome.BUSY  # `a` is still arriving
    time.sleep(0.06)
    assert q.grow(b, 30) is Outcome.BUSY  # part of a body: it may not evict
    assert q.grow(b, 30, is_last=True) is None  # whole: `a` stalled, so its bytes go to `b`
    assert evicted == ["a"] and q.pending_bytes == 30 and q.num_evicted == 1
    assert q.settle(a) == 0 and q.grow(a, 1) is Outcome.BUSY
    assert q.reserve(80) is Outcome.BUSY  # `b` is whole (progress at its last byte): not a victim
    assert q.settle(b) == 30
    assert q.reserve(70) is None and q.pending_bytes == 100


def test_a_trickle_is_not_progress():
    """A body that moves fewer than PROGRESS_BYTES per `stall_s` counts as stalled, however often it sends."""
    q = PendingQueue(100, stall_s=0.05)
    a = q.open_hold()
    for _ in range(10):
        assert q.grow(a, 5) is None
        time.sleep(0.01)
    assert q.reserve(90) is None and a.is_evicted


def _head(length: int | None) -> bytes:
    framing = b"Transfer-Encoding: chunked" if length is None else b"Content-Length: %d" % length
    return b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n" + framing + b"\r\n\r\n"


def _post(port: int, body: bytes) -> httpx.Response:
    return httpx.post(
        f"http://127.0.0.1:{port}/v1/traces",
        content=body,
        timeout=10,
        headers={"Content-Type": "application/x-protobuf"},
    )


def _served_within_1s(c: Collector, body: bytes) -> None:
    """A real export over HTTP and over gRPC, each answered success within a second."""
    t0 = time.perf_counter()
    assert _post(c.http_port, body).status_code == 200
    http_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with grpc.insecure_channel(f"127.0.0.1:{c.grpc_port}") as ch:
        assert ch.unary_unary(EXPORT)(body, timeout=5) == b""
    grpc_s = time.perf_counter() - t0
    assert http_s < 1.0 and grpc_s < 1.0, (http_s, grpc_s)


def test_oversized_headers_and_garbage_get_an_answer_and_a_close(archive_path):
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        s = _raw(c.http_port, b"POST /v1/traces HTTP/1.1\r\nX-Big: " + b"a" * (hr.MAX_HEADER_BYTES + 10) + b"\r\n\r\n")
        assert _answer(s).startswith(b"HTTP/1.1 431 ")
        s.close()
        s = _raw(c.http_port, b"\x16\x03\x01 hello, not http\r\n\r\n")
        assert _answer(s).startswith(b"HTTP/1.1 400 ")
        s.close()
        s = _raw(
            c.http_port,
            b"POST /v1/traces HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        )
        assert _answer(s).startswith(b"HTTP/1.1 400 ")
        s.close()
        _wait_for(lambda: c._queue.pending_bytes == 0)
        assert c.stats.batches == 0


def test_keep_alive_pipelined_and_chunked_requests_are_each_answered(archive_path):
    (a, _), (b, _) = _bodies(), _bodies()
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        chunked = (
            head
            + b"Transfer-Encoding: chunked\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (b[:100], b[100:]))
            + b"0\r\n\r\n"
        )
        s = _raw(c.http_port, head + b"Content-Length: %d\r\n\r\n" % len(a) + a + chunked)
        first = _answer(s)
        second = first.split(b"\r\n\r\n", 1)[1] or _answer(s)
        s.close()
        assert first.startswith(b"HTTP/1.1 200 ") and b"HTTP/1.1 200 " in second
    assert c.stats.batches == 2 and c.stats.spans == 30
