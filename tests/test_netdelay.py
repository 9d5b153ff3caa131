"""The delaying TCP hop adds its delay, both ways, over real sockets."""

from __future__ import annotations

import socket
import threading
import time

from budgetscope.demo.netdelay import DelayProxy


def _echo_server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(
                target=lambda c=c: [c.sendall(d) for d in iter(lambda: c.recv(4096), b"")], daemon=True
            ).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv


def _round_trip(port: int) -> float:
    with socket.create_connection(("127.0.0.1", port)) as s:
        t = time.perf_counter()
        s.sendall(b"ping")
        assert s.recv(4) == b"ping"
        return (time.perf_counter() - t) * 1000


def test_slow_connections_wait_both_ways():
    srv = _echo_server()
    with DelayProxy(srv.getsockname()[1], delay_ms=60, slow_fraction=1.0) as p:
        rtt = _round_trip(p.port)
    assert 120 <= rtt < 400  # 60 ms up + 60 ms down
    srv.close()


def test_fast_connections_pass_at_once():
    srv = _echo_server()
    with DelayProxy(srv.getsockname()[1], delay_ms=500, slow_fraction=0.0) as p:
        rtt = _round_trip(p.port)
        assert (p.connections, p.slow_connections) == (1, 0)
    assert rtt < 100
    srv.close()
