"""Freshness of a live archive: acknowledged by the collector → visible in a reader's `requests`.

    python benchmarks/bench_freshness.py [--seconds 20] [--rate 50]

A client posts one whole request trace (OTLP/JSON over HTTP, as an exporter would) every 1/rate s to a real
`Collector` writing a folder archive; a reader in the same process opens the archive (a new reader each time, as
`report` does) and looks for the acknowledged traces among `requests`. Prints p50/p99/max of ack → visible.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
import httpx

from budgetscope.archive.errors import ArchiveError
from budgetscope.collector import Collector
from budgetscope.opener import Archive
from common import machine
from otlp_wire import export, native_request


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=50.0, help="traces per second")
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()
    archive = Path(args.out) / "freshness"
    shutil.rmtree(archive, ignore_errors=True)
    archive.parent.mkdir(exist_ok=True)
    acked: dict[str, int] = {}  # trace id -> ack time (ns)
    visible: dict[str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()
    reads = [0]

    def reader() -> None:
        while not stop.is_set() or len(visible) < len(acked):
            with lock:
                waiting = [t for t in acked if t not in visible]
            if not waiting:
                time.sleep(0.005)
                continue
            try:
                with Archive(archive, read_only=True) as r:
                    found = r.con.execute(
                        "SELECT trace_id FROM requests WHERE trace_id IN (SELECT unnest(?))", [waiting]
                    ).fetchall()
            except ArchiveError:
                continue
            now = time.time_ns()
            reads[0] += 1
            for (t,) in found:
                visible.setdefault(t, now)

    with Collector(archive, grpc_port=None, http_port=0) as c:
        rt = threading.Thread(target=reader)
        rt.start()
        with httpx.Client(timeout=30) as h:
            end = time.monotonic() + args.seconds
            nxt = time.monotonic()
            while time.monotonic() < end:
                tid, spans = native_request(arrival=time.time_ns(), client=(1, 1))
                r = h.post(
                    f"http://127.0.0.1:{c.http_port}/v1/traces",
                    content=json.dumps(export(spans)),
                    headers={"Content-Type": "application/json"},
                )
                if r.status_code == 200:
                    with lock:
                        acked[tid] = time.time_ns()
                nxt += 1 / args.rate
                time.sleep(max(0.0, nxt - time.monotonic()))
        stop.set()
        rt.join(timeout=30)
    lags = sorted((visible[t] - acked[t]) / 1e6 for t in acked if t in visible)
    q = statistics.quantiles(lags, n=100, method="inclusive")
    print(f"machine: {machine()}")
    print(
        f"{len(acked):,} traces acknowledged at {args.rate:g}/s over {args.seconds:g} s, {len(lags):,} seen by "
        f"{reads[0]:,} reader opens"
    )
    print(f"ack -> visible in requests: p50 {q[49]:.0f} ms, p99 {q[98]:.0f} ms, max {lags[-1]:.0f} ms")


if __name__ == "__main__":
    main()
