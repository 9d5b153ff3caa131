"""The OTLP/HTTP receiver's framing against hostile input (issue 37): chunk sizes, headers, request lines and
gzip bodies parsed strictly, each refused with its status, one line, a closed connection and nothing landed;
pipelined requests whose answers are never read held to a bound; a bug in a handler costs one connection and
one line. A real collector on loopback and real sockets. The full-size attacks, with the collector's RSS and
the answers of real exporters meanwhile, are `benchmarks/fault_collector_abuse.py`."""

from __future__ import annotations

import gzip
import logging
import socket
import time
import zlib

import httpx
import pytest

from budgetscope.collector import Collector, inflate, pending
from budgetscope.collector import http_receiver as hr
from hostile_http import FRAMING, HEAD, REQUEST_LINES

pytest.importorskip("grpc")
from test_collector import _bodies, _clean_otlp_env, _wait_for  # noqa: E402,F401 - the fixture is used by name


def _files(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _exchange(port: int, data: bytes, timeout_s: float = 10) -> tuple[bytes, bool]:
    """Send `data` and half-close; (everything answered, whether the collector closed the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # answered and closed before all of it was read
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            return out, False
        except OSError:
            pass  # reset after the answer
        return out, True


def _export(port: int, body: bytes, encoding: str = "identity") -> httpx.Response:
    """A real OTLP/HTTP export of `body` (protobuf) with this Content-Encoding."""
    return httpx.post(
        f"http://127.0.0.1:{port}/v1/traces",
        content=body,
        headers={"Content-Type": "application/x-protobuf", "Content-Encoding": encoding},
        timeout=30,
    )


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    """One collector for the malformed requests: after one commit, its archive's files must not change."""
    path = tmp_path_factory.mktemp("framing") / "archive"
    with Collector(path, grpc_port=None, http_port=0) as c:
        proto, _ = _bodies()
        r = _export(c.http_port, proto)
        assert r.status_code == 200
        _wait_for(lambda: c.stats.batches_landed == 1, timeout_s=60)  # its commit, with the requests it derives
        time.sleep(1.5)  # and the next (empty) commit: nothing more is published
        yield c, path


CASES = [(what, HEAD + rest, want) for what, rest, want in FRAMING] + REQUEST_LINES


@pytest.mark.parametrize(("what", "data", "want"), CASES, ids=[c[0] for c in CASES])
def test_a_malformed_request_gets_its_status_one_line_a_close_and_lands_nothing(collector, caplog, what, data, want):
    c, path = collector
    before, batches = _files(path), c.stats.batches
    with caplog.at_level(logging.DEBUG, logger="budgetscope.collector"):
        out, closed = _exchange(c.http_port, data)
    head = out.partition(b"\r\n\r\n")[0]
    assert out.startswith(b"HTTP/1.1 %d " % want), (what, out[:300])
    assert closed and b"Connection: close" in head and out.count(b"Server: budgetscope-collector") == 1
    assert b"Traceback" not in out
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text
    _wait_for(lambda: c._queue.pending_bytes == 0)
    assert c.stats.batches == batches and _files(path) == before


def test_a_chunk_size_of_minus_one_is_refused_before_any_byte_is_kept(archive_path):
    """Chunk size -1 made `read(-1)` read to the end of the connection: +1,021 MB in 1.8 s against a 64 MB limit.
    Now 400 at once, and the data that follows is never held."""
    with Collector(
        archive_path, grpc_port=None, http_port=0, max_pending_bytes=1 << 20, max_message_bytes=1 << 20
    ) as c:
        s = socket.create_connection(("127.0.0.1", c.http_port), timeout=10)
        s.sendall(HEAD + b"Transfer-Encoding: chunked\r\n\r\n-1\r\n")
        answer = s.recv(65536)
        assert answer.startswith(b"HTTP/1.1 400 ") and b"malformed chunk size" in answer
        try:
            for _ in range(64):
                s.sendall(bytes(64 << 10))  # what the attacker pushes after it is read for a second at most
        except OSError:
            pass
        assert c._queue.pending_bytes == 0
        s.close()
    assert c.stats.batches == 0


def test_chunk_extensions_and_trailers_are_accepted_and_dropped(archive_path):
    proto, _ = _bodies()
    body = (
        b'%x;name=value;quoted="a \\" b" ;bare\r\n%s\r\n' % (len(proto) - 10, proto[:-10])
        + b"a\r\n%s\r\n" % proto[-10:]
        + b"0;last=1\r\nX-Trailer: yes\r\nX-Other:\r\n\r\n"
    )
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        out, _ = _exchange(c.http_port, b"\r\n" + HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + body)
    assert out.startswith(b"HTTP/1.1 200 ")
    assert c.stats.batches == 1 and c.stats.spans == 15


def test_tiny_chunks_past_one_per_kib_are_refused(archive_path):
    body = b"1\r\nx\r\n" * 2000 + b"0\r\n\r\n"
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        out, closed = _exchange(c.http_port, HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + body)
    assert out.startswith(b"HTTP/1.1 400 ") and b"chunks average under 1 KiB" in out and closed
    assert c.stats.batches == 0


def test_a_get_with_a_body_is_answered_then_closed(archive_path):
    """A body the receiver does not read would be parsed as the next request: the connection ends instead."""
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        smuggled = (
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        )
        get = b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(smuggled)
        out, closed = _exchange(c.http_port, get + smuggled)
    assert out.startswith(b"HTTP/1.1 200 ") and out.count(b"HTTP/1.1 ") == 1 and closed
    assert c.stats.batches == 0


def test_pipelined_answers_never_read_hold_the_write_buffer_at_most(archive_path, monkeypatch):
    """`GET /metrics` x 300,000 whose answers are never read grew the collector +987 MB: each answer was written,
    none read. Now no request is read while more than WRITE_BUFFER_BYTES of answers wait, and a peer that reads
    none of them for SEND_STALL_S is cut; a real export is served meanwhile."""
    monkeypatch.setattr(hr, "SEND_STALL_S", 1.0)
    proto, _ = _bodies()
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        receiver = c._receivers[0]
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel holds few answers for us
        s.connect(("127.0.0.1", c.http_port))
        s.settimeout(0.2)
        burst = memoryview(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 300_000)
        sent, t_end = 0, time.monotonic() + 5
        while sent < len(burst) and time.monotonic() < t_end:
            try:
                sent += s.send(burst[sent:])
            except TimeoutError:
                continue  # the collector stopped reading
            except OSError:
                break  # cut
        assert sent < len(burst)  # the collector stopped reading long before the end
        assert receiver.num_requests < 300_000
        waiting = [conn.writer.transport.get_write_buffer_size() for conn in list(receiver._connections)]
        assert all(w <= hr.WRITE_BUFFER_BYTES + 4096 for w in waiting), waiting
        r = _export(c.http_port, proto)
        assert r.status_code == 200
        _wait_for(lambda: receiver.num_connections == 0, timeout_s=5)  # cut: its answers unread for 1 s
        assert receiver.num_timed_out >= 1
        s.close()


def test_gzip_members_are_capped_and_a_few_are_served(archive_path):
    """314,572 empty gzip members cost ~35 CPU-s a body (quadratic) and took both inflating threads: refused
    400 at the 65th member now. An export split into a few members (as `cat a.gz b.gz` makes) still lands."""
    proto, _ = _bodies()
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        r = _export(c.http_port, gzip.compress(b"", mtime=0) * 314_572, "gzip")
        assert r.status_code == 400 and "more than 64 members" in r.text
        pieces = [proto[i : i + 50] for i in range(0, len(proto), 50)]
        assert len(pieces) <= inflate.MAX_GZIP_MEMBERS
        r = _export(c.http_port, b"".join(gzip.compress(p) for p in pieces), "gzip")
        assert r.status_code == 200
        _wait_for(lambda: c._queue.pending_bytes == 0)
    assert c.stats.batches == 1 and c.stats.spans == 15


@pytest.mark.parametrize(
    ("encoding", "pack"),
    [
        ("deflate", zlib.compress),
        ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as some clients send
        ("x-gzip", gzip.compress),
    ],
    ids=["zlib", "raw-deflate", "x-gzip"],
)
def test_deflate_in_both_forms_and_x_gzip_are_inflated(archive_path, encoding, pack):
    proto, _ = _bodies()
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        assert _export(c.http_port, pack(proto), encoding).status_code == 200
    assert c.stats.spans == 15


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (gzip.compress(b"x" * 1000)[:-10], "truncated gzip"),
        (gzip.compress(b"x") + b"\x00\x00", "not valid gzip"),
        (b"not gzip at all", "not valid gzip"),
    ],
    ids=["truncated", "trailing-zeros", "garbage"],
)
def test_a_bad_gzip_body_is_one_line_400(archive_path, body, message):
    with Collector(archive_path, grpc_port=None, http_port=0) as c:
        r = _export(c.http_port, body, "gzip")
        assert r.status_code == 400 and message in r.text
    assert c.stats.batches == 0


def test_an_inflated_body_joins_the_pending_budget(archive_path, monkeypatch):
    """Once whole, the output counts against `max_pending_bytes`: with 3 of 4 MiB held by a body still arriving,
    a gzip body that inflates to 2 MiB is answered busy (429) and holds nothing after."""
    monkeypatch.setattr(pending, "EVICT_STALLED_AFTER_S", 60.0)
    with Collector(
        archive_path, grpc_port=None, http_port=0, max_pending_bytes=4 << 20, max_message_bytes=4 << 20
    ) as c:
        held = socket.create_connection(("127.0.0.1", c.http_port), timeout=10)
        held.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % (4 << 20) + bytes(3 << 20))
        _wait_for(lambda: c._queue.pending_bytes == 3 << 20)
        r = _export(c.http_port, gzip.compress(bytes(2 << 20)), "gzip")
        assert r.status_code == 429 and r.headers["retry-after"]
        assert c._queue.pending_bytes == 3 << 20
        held.close()
        _wait_for(lambda: c._queue.pending_bytes == 0)
    assert c.stats.batches == 0


def test_the_inflater_steps_are_bounded():
    """Each step makes at most STEP_BYTES and starts at most MAX_GZIP_MEMBERS members; the input is fed to zlib
    FEED_BYTES at a time (no member's end copies the rest of the body); the output is counted as it is made."""
    pool = inflate.InflatePool(16 << 20)
    i = inflate.Inflater(gzip.compress(bytes(5 << 20)), "gzip", 8 << 20, pool)
    steps = 0
    while not i.step():
        steps += 1
        assert i.size <= steps * inflate.STEP_BYTES and pool.used == i.held == i.size
    assert i.output == bytes(5 << 20) and steps == (5 << 20) // inflate.STEP_BYTES
    pool.release(i)
    assert pool.used == 0
    many = inflate.Inflater(gzip.compress(b"", mtime=0) * 1000, "gzip", 1 << 20, pool)
    with pytest.raises(inflate.InflateError, match="more than 64 members"):
        many.step()
    assert many.pos <= 20 * (inflate.MAX_GZIP_MEMBERS + 1)


def test_members_that_span_many_steps_are_inflated_whole():
    """A member whose output took several steps ends with zlib's `unconsumed_tail` left from the step before:
    counting it as unread input put the next member's start before the body's (a 2 GiB bomb got 400, not 413)."""
    member = gzip.compress(bytes(16 << 20), compresslevel=9)
    pool = inflate.InflatePool(64 << 20)
    whole = inflate.Inflater(member * 3, "gzip", 48 << 20, pool)
    while not whole.step():
        pass
    assert whole.output == bytes(48 << 20) and whole.members == 3
    pool.release(whole)
    bomb = inflate.Inflater(member * 128, "gzip", 16 << 20, pool)
    with pytest.raises(inflate.InflateError, match="exceeds 16,777,216 bytes"):
        while not bomb.step():
            pass


def test_the_largest_inflations_give_way_to_smaller_ones():
    """The pool full of bodies on their way to 413 (bombs): a small body's output takes the largest's bytes,
    which is then answered busy; a body as large as the others waits its turn by being refused itself."""
    step = inflate.STEP_BYTES
    pool = inflate.InflatePool(4 * step)
    bombs = [inflate.Inflater(gzip.compress(bytes(16 << 20)), "gzip", 16 << 20, pool) for _ in range(4)]
    for b in bombs:
        b.step()  # a step each: the pool is full
    assert pool.used == 4 * step
    small = inflate.Inflater(gzip.compress(bytes(100_000)), "gzip", 16 << 20, pool)
    assert small.step() and small.output == bytes(100_000)
    given_way = [b for b in bombs if b.has_given_way]
    assert len(given_way) == 1 and pool.used == 3 * step + 100_000
    with pytest.raises(inflate.Busy):
        given_way[0].step()
    with pytest.raises(inflate.Busy):  # a bomb's next step: the others are no larger than it will be
        next(b for b in bombs if not b.has_given_way).step()


def test_a_bug_in_a_handler_costs_one_connection_and_one_line(archive_path, caplog):
    """A handler that raises (a fake, standing for a bug): 500 with one line in the log, no traceback above
    DEBUG, and the receiver goes on serving."""
    proto, _ = _bodies()
    with Collector(archive_path, grpc_port=None, http_port=0) as c:

        def fake_metrics_that_raise():
            raise RuntimeError("boom")

        c._receivers[0].self_metrics = fake_metrics_that_raise
        with caplog.at_level(logging.INFO, logger="budgetscope.collector"):
            out, closed = _exchange(c.http_port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 500 ") and closed
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "RuntimeError: boom" in errors[0].getMessage() and not errors[0].exc_info
        r = _export(c.http_port, proto)
        assert r.status_code == 200


def test_well_formed_heads_parse_as_rfc_9112_reads_them():
    from budgetscope.collector.http_framing import chunk_size, parse_head

    r = parse_head(b"POST http://x/v1/traces HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nx-a:\t2 \r\nConnection: a, Close\r\n\r\n")
    assert (r.method, r.target, r.version, r.length, r.keep_alive) == (
        "POST",
        "http://x/v1/traces",
        "HTTP/1.1",
        0,
        False,
    )
    assert r.headers["x-a"] == "1, 2" and not r.has_body
    r = parse_head(b"POST / HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 007\r\n\r\n")
    assert (r.version, r.length, r.keep_alive, r.has_body) == ("HTTP/1.0", 7, True, True)
    r = parse_head(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\nX-B: caf\xc3\xa9\r\n\r\n")
    assert r.is_chunked and r.headers["x-b"] == "caf\xc3\xa9" and r.keep_alive
    assert [chunk_size(x) for x in (b"0\r\n", b"fF\r\n", b'10 ;a=b ; c="d;e"\r\n', b"ffffffffffffffff\r\n")] == [
        0,
        255,
        16,
        2**64 - 1,
    ]


def test_expect_100_continue_is_answered_before_the_body_and_the_body_lands(tmp_path):
    proto, _ = _bodies()
    head = (
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        b"Content-Length: %d\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n" % len(proto)
    )
    with Collector(tmp_path / "a", grpc_port=None, http_port=0) as c:
        with socket.create_connection(("127.0.0.1", c.http_port), timeout=10) as s:
            s.sendall(head)
            assert s.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"  # before a byte of the body was sent
            s.sendall(proto)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        assert out.startswith(b"HTTP/1.1 200 "), out[:80]
        # a refused head gets its refusal, no 100
        out, _ = _exchange(c.http_port, head.replace(b"Host: x", b"Host: x\r\nContent-Encoding: br"))
        assert out.startswith(b"HTTP/1.1 415 ") and b"100 Continue" not in out, out[:80]
        _wait_for(lambda: c.stats.batches_landed == 1, timeout_s=60)
